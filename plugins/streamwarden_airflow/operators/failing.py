"""How a Streamwarden step fails in Airflow, and how a run's report task learns which of its steps failed or
never ran: the failure document a step pushes for it, and each step's state in the run."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowFailException

from streamwarden.alerts import Alert
from streamwarden.failures import classify

T = TypeVar("T")
FAILURE_KEY = "failure"
"""XCom key of a failed step's failure document (:meth:`streamwarden.failures.Failure.to_json`)."""
DONE = ("success", "skipped")
"""Step states a report counts as done: a skipped step was skipped on purpose (a dry run)."""


def run_step(context: Context, work: Callable[[], T]) -> T:
    """Run ``work``; on failure push its classified failure document (XCom :data:`FAILURE_KEY`) for the report
    task to alert with, and fail the task without retry (a retry would not change a classified failure)."""
    try:
        return work()
    except Exception as exc:
        document = classify(exc).to_json()
        context["ti"].xcom_push(key=FAILURE_KEY, value=document)
        raise AirflowFailException(f"{document['failure_class']}: {document['message']}") from exc


@dataclass(frozen=True)
class StepOutcome:
    """A step of this run as its report sees it: its state and the failure document it pushed, if any."""

    task_id: str
    state: str | None
    failure: dict[str, Any] | None

    @property
    def done(self) -> bool:
        return self.state in DONE and self.failure is None

    @property
    def failed(self) -> bool:
        return self.failure is not None or self.state == "failed"

    def describe(self) -> str:
        """What happened to the step, in a few words (its failure's message is in the alert and the log)."""
        if self.failure is not None:
            return f"{self.task_id} failed ({self.failure['failure_class']})"
        if self.state == "failed":
            # No document: the step died before it could push one (killed, or Airflow's API unreachable).
            return f"{self.task_id} failed without a failure document (killed, or it lost Airflow's API: see its log)"
        if self.state == "upstream_failed":
            return f"{self.task_id} never ran (a step before it failed)"
        return f"{self.task_id} never ran (state {self.state})"


def step_outcomes(context: Context, step_ids: Sequence[str]) -> list[StepOutcome]:
    """The state and failure document of each of ``step_ids`` in this run, in that order.

    A report task runs whatever its steps did (``trigger_rule="all_done"``); reading only the steps' XComs it
    cannot tell a step that found nothing from one that was killed before it could push, or never ran.
    """
    ti = context["ti"]
    states = ti.get_task_states(dag_id=ti.dag_id, task_ids=list(step_ids), run_ids=[ti.run_id]).get(ti.run_id, {})
    return [StepOutcome(task, states.get(task), ti.xcom_pull(task_ids=task, key=FAILURE_KEY)) for task in step_ids]


def failed_steps(outcomes: Sequence[StepOutcome]) -> str | None:
    """The steps that failed, described and ``"; "``-joined; None when none did."""
    return "; ".join(o.describe() for o in outcomes if o.failed) or None


def not_done(outcomes: Sequence[StepOutcome]) -> str | None:
    """The steps that failed, then those that never ran, described and ``"; "``-joined; None when every
    one is done."""
    return "; ".join(o.describe() for o in sorted(outcomes, key=lambda o: not o.failed) if not o.done) or None


def alert_failures(outcomes: Sequence[StepOutcome], send: Callable[[Alert], object],
                   alert_for: Callable[[dict[str, Any], str], Alert]) -> list[StepOutcome]:
    """Send ``alert_for(failure document, task id)`` for each step that pushed a failure document; those steps.
    (A step killed before it could push one has no document: :func:`failed_steps` describes it.)"""
    failed = [step for step in outcomes if step.failure is not None]
    for step in failed:
        assert step.failure is not None
        send(alert_for(step.failure, step.task_id))
    return failed
