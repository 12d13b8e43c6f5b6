"""The steps of ``maintain_tables`` as operators: plan, compact and prove, vacuum, report.

The work is done by :mod:`streamwarden.maintenance.steps`; these read the run's Params and the previous
step's XCom, call the step, log what it did, and push the result. A step that fails pushes its failure
document (XCom key ``failure``) so that ``record_report`` can alert with the class, the evidence and
the next action, and record the run in ``<run_root>/maintenance/history.jsonl``.
"""

from __future__ import annotations

import logging
from typing import Any

from airflow.sdk import AssetAlias, BaseOperator, Context
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from streamwarden.maintenance import steps
from streamwarden.maintenance.alerting import failure_alert
from streamwarden.maintenance.cleanup import Cleanup
from streamwarden.maintenance.compaction import Compaction, new_run_id
from streamwarden.maintenance.plan import TablePlan
from streamwarden.maintenance.report import MaintenanceReport, append_history
from streamwarden.maintenance.request import MaintenanceRequest, request_from_params
from streamwarden.maintenance.settings import MiB
from streamwarden.runfiles.hold import read_hold
from streamwarden_airflow.hooks.tables import DeltaTablesHook
from streamwarden_airflow.operators.failing import alert_failures, failed_steps, not_done, run_step, step_outcomes
from streamwarden_airflow.operators.run_source import run_source

log = logging.getLogger("streamwarden.maintenance")
MAINTAINED = AssetAlias("streamwarden-maintenance")
"""Each table a run compacted or cleaned up gets one asset event (the figures as the extra) through this alias,
from the run's last changing step: ``validate_output`` is scheduled on the tables' assets, so it runs once after
each maintenance run."""


HELD = "skipped: the stream was held"
"""The outcome of a run whose compaction a recovery's or an upgrade's hold kept out (not a failure: the next run
compacts)."""


def _skip_if_held(hook: DeltaTablesHook, what: str) -> None:
    """A recovery or an upgrade holds the stream (it may roll the tables back): this step does nothing and says so,
    as a skip, not a failure; the next run does the work."""
    held = read_hold(hook.settings)
    if held is not None:
        raise AirflowSkipException(f"nothing {what}: the stream is {held.describe()}; the next run does it")


def _plans(context: Context, plan_task_id: str) -> tuple[str, MaintenanceRequest, list[TablePlan]]:
    planned = context["ti"].xcom_pull(task_ids=plan_task_id)
    return (planned["run_id"], MaintenanceRequest.from_json(planned["request"]),
            [TablePlan.from_json(p) for p in planned["plans"]])


class PlanCompactionOperator(BaseOperator):
    """Checks the run's Params, then plans each table: partitions, small files, whether compaction pays.

    The plan is logged as a table and pushed to XCom with the checked request and a run id. Nothing is
    changed. A bad Param fails here, naming it.
    """

    def execute(self, context: Context) -> dict[str, Any]:
        def work() -> dict[str, Any]:
            hook = DeltaTablesHook()
            request = request_from_params(context.get("params") or {}, hook.settings, hook.maintenance)
            plans = steps.plan(hook.settings, request)
            run_id = new_run_id()
            log.info("plan (target %d MiB, small below %d MiB, at least %d small files)%s:\n%s",
                     request.target_file_size // MiB, request.small_file_bytes // MiB, request.min_files,
                     ", dry run" if request.dry_run else "",
                     MaintenanceReport.build(run_id, dry_run=request.dry_run, outcome="planned", plans=plans,
                                             compactions=[], cleanups=[]).text())
            return {"run_id": run_id, "request": request.to_json(), "plans": [p.to_json() for p in plans]}
        return run_step(context, work)


class CompactPartitionsOperator(BaseOperator):
    """Compacts each planned partition (one Delta commit each) and proves every commit; skipped in a dry run.

    :param plan_task_id: the :class:`PlanCompactionOperator` task
    """

    def __init__(self, *, plan_task_id: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.plan_task_id = plan_task_id

    def execute(self, context: Context) -> list[dict[str, Any]]:
        run_id, request, plans = _plans(context, self.plan_task_id)
        if request.dry_run:
            raise AirflowSkipException("dry run: the plan is in plan_compaction's log; nothing compacted")
        hook = DeltaTablesHook()
        _skip_if_held(hook, "compacted")
        done = run_step(context, lambda: steps.compact(hook.settings, request, plans, run_id))
        return [c.to_json() for c in done]


class CleanUpTablesOperator(BaseOperator):
    """Vacuums files no kept version references, checkpoints the log and drops expired log files; in a dry
    run only counts what vacuum would delete. Emits one asset event per table the run compacted or cleaned up
    (not in a dry run) through :data:`MAINTAINED`, the compaction's figures and the cleanup's as the extra.

    :param plan_task_id: the :class:`PlanCompactionOperator` task (for the tables and the dry run)
    :param compact_task_id: the :class:`CompactPartitionsOperator` task (for what it compacted)
    """

    def __init__(self, *, plan_task_id: str, compact_task_id: str, **kwargs: Any) -> None:
        super().__init__(trigger_rule="none_failed", outlets=[MAINTAINED], **kwargs)  # after a dry run's skip too
        self.plan_task_id = plan_task_id
        self.compact_task_id = compact_task_id

    def execute(self, context: Context) -> list[dict[str, Any]]:
        run_id, request, plans = _plans(context, self.plan_task_id)
        hook = DeltaTablesHook()
        if not request.dry_run:
            _skip_if_held(hook, "vacuumed")
        done = run_step(context, lambda: steps.clean_up(hook.settings, hook.maintenance, request))
        compacted = [Compaction(**c) for c in context["ti"].xcom_pull(task_ids=self.compact_task_id) or []]
        totals = MaintenanceReport.build(run_id, dry_run=request.dry_run, outcome="cleaned up", plans=plans,
                                         compactions=compacted, cleanups=[]).table_totals()
        changed = {table: figures for table, figures in totals.items() if figures["partitions_compacted"]}
        cleaned = {cleanup.table: cleanup.to_json() for cleanup in done if not cleanup.dry_run}
        for table in sorted(changed.keys() | cleaned.keys()):
            context["outlet_events"][MAINTAINED].add(hook.asset(table), extra={
                **changed.get(table, {}), **({"cleanup": cleaned[table]} if table in cleaned else {})})
        return [c.to_json() for c in done]


class MaintenanceReportOperator(BaseOperator):
    """Records the run (whatever the other steps did): a table in the log, XCom, ``history.jsonl``;
    alerts on each step's failure document; fails when a step failed or never ran, naming it.

    :param plan_task_id, compact_task_id, clean_up_task_id: the steps whose results it reports
    """

    def __init__(self, *, plan_task_id: str, compact_task_id: str, clean_up_task_id: str, **kwargs: Any) -> None:
        super().__init__(trigger_rule="all_done", **kwargs)
        self.step_ids = (plan_task_id, compact_task_id, clean_up_task_id)

    def execute(self, context: Context) -> dict[str, Any]:
        ti = context["ti"]
        plan_id, compact_id, clean_id = self.step_ids
        planned = ti.xcom_pull(task_ids=plan_id) or {"run_id": "-", "request": None, "plans": []}
        request = MaintenanceRequest.from_json(planned["request"]) if planned["request"] else None
        outcomes = step_outcomes(context, self.step_ids)
        # The outcome names the steps that failed (the cause); the run's failure also those that never ran.
        dry_run = request is not None and request.dry_run
        held = not dry_run and outcomes[1].state == "skipped"  # compaction's only other skip: a held stream
        outcome = failed_steps(outcomes) or not_done(outcomes) or ("dry run" if dry_run else HELD if held else "ok")
        report = MaintenanceReport.build(
            planned["run_id"], dry_run=bool(request and request.dry_run), outcome=outcome,
            plans=[TablePlan.from_json(p) for p in planned["plans"]],
            compactions=[Compaction(**c) for c in ti.xcom_pull(task_ids=compact_id) or []],
            cleanups=[Cleanup(**c) for c in ti.xcom_pull(task_ids=clean_id) or []])
        hook = DeltaTablesHook()
        append_history(steps.maintenance_folder(hook.settings) / "history.jsonl", report)
        log.info("maintenance report:\n%s", report.text())
        source = run_source(context)
        alert_failures(outcomes, hook.send_alert, lambda failure, task: failure_alert(failure, source=source,
                                                                                    task=task))
        if any(not step.done for step in outcomes):
            raise AirflowFailException(f"maintenance failed: {not_done(outcomes)}; see the report above")
        return report.to_json()
