"""Which DAG run an operator works for: the ``dag_id/run_id`` string its alerts, holds and journals name."""

from __future__ import annotations

from airflow.sdk import Context


def run_source(context: Context, without_run: str = "") -> str:
    """``<dag_id>/<run_id>`` of the run ``context`` belongs to; ``without_run`` when there is none (a task run on
    its own, outside a DAG run)."""
    run = context.get("dag_run")
    return f"{run.dag_id}/{run.run_id}" if run is not None else without_run
