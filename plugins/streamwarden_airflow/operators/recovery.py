"""The steps of ``recover_stream`` as operators: check the Params, plan, then (approved) act and report.

The work is done by :mod:`streamwarden.recovery.steps`; these read the run's Params and the previous step's
XCom, call the step and push its result. A step that fails pushes its failure document
(:data:`~streamwarden_airflow.operators.failing.FAILURE_KEY`) so that ``report_and_alert`` alerts with the
class, the evidence and the next action. Stopping and starting the stream run in the ``stream_lifecycle``
pool. The approval is Airflow's ``ApprovalOperator``; the wait for the replay is
:class:`~streamwarden_airflow.sensors.recovery.CaughtUpSensor`.
"""

from __future__ import annotations

import logging
from typing import Any

from airflow.sdk import BaseOperator, Context
from airflow.sdk.exceptions import AirflowFailException

from streamwarden.alerts import Alert, step_failed_alert
from streamwarden.approvals import ANSWER_KEY, ApprovalAnswer, not_approved
from streamwarden.recovery import steps
from streamwarden.recovery.plan import RecoveryPlan
from streamwarden.recovery.request import RecoveryRequest, request_from_params
from streamwarden.runfiles.hold import release_hold
from streamwarden.validation import steps as validation_steps
from streamwarden.warden.launcher import StreamAlreadyRunningError
from streamwarden.warden.stop import LIFECYCLE_POOL
from streamwarden_airflow.hooks.stream import StreamwardenHook
from streamwarden_airflow.hooks.tables import DeltaTablesHook
from streamwarden_airflow.operators.failing import alert_failures, failed_steps, run_step, step_outcomes
from streamwarden_airflow.operators.run_source import run_source

log = logging.getLogger("streamwarden.recovery")
PLAN_TASK = "plan_recovery"
APPROVAL_TASK = "approve"
EXECUTED_TASK = "hold_and_stop"
STEP_IDS = ("check_params", PLAN_TASK, EXECUTED_TASK, "archive_checkpoint", "restore_tables", "seed_checkpoint",
            "start_stream", "wait_caught_up", "validate")
_ACTIONS = {
    "CONFIG": ("Fix the Param named in the message and trigger recover_stream again (a dry run first). If the "
               "stream is held (`streamwarden status`, run/hold.json), re-run the failed task: every step is "
               "idempotent."),
    "ENVIRONMENT": ("The broker or storage could not be reached: check them, then clear the failed task of this "
                    "run (every step is idempotent; the stream stays held until start_stream)."),
    "INTEGRITY": ("A check after a step found what it did not expect (the evidence says which): do not start the "
                  "stream by hand; read the recovery folder under run/recoveries/ and the evidence, then re-run "
                  "the task or restore from the archived checkpoint."),
}


def owner(context: Context) -> str:
    """The hold's owner: this DAG run."""
    return run_source(context, "recover_stream/manual")


def _plan(context: Context, task_id: str) -> RecoveryPlan:
    document = context["ti"].xcom_pull(task_ids=task_id)
    if document is None:
        raise AirflowFailException(f"{task_id} left no plan (see its log)")
    return RecoveryPlan.from_json(document)


class CheckRecoveryParamsOperator(BaseOperator):
    """Checks the run's Params (target and its value, dry_run, reason); pushes the checked request. A bad one
    fails here, naming it; nothing is read or changed."""

    def execute(self, context: Context) -> dict[str, Any]:
        def work() -> dict[str, Any]:
            request = request_from_params(context.get("params") or {}, DeltaTablesHook().settings)
            log.info("recovering to %s (%s)%s", request.describe(), request.reason or "no reason given",
                     "; dry run: plan only" if request.dry_run else "")
            return request.to_json()
        return run_step(context, work)


class PlanRecoveryOperator(BaseOperator):
    """Plans the recovery against the tables and the broker as they are: the blast radius (versions and rows
    undone, offsets replayed and lost, time), as tables in the log; pushes the plan, and its Markdown under
    ``markdown`` for the approval request."""

    def execute(self, context: Context) -> dict[str, Any]:
        request = RecoveryRequest.from_json(context["ti"].xcom_pull(task_ids="check_params"))
        settings = DeltaTablesHook().settings
        made = run_step(context, lambda: steps.plan(settings, request, run_key=owner(context)))
        context["ti"].xcom_push(key="markdown", value=made.text())
        return made.to_json()


class HoldAndStopOperator(BaseOperator):
    """Holds the stream (the warden, the launcher and maintenance keep off until start_stream), stops it
    (drained), plans again with the approved versions and refuses when more would be lost than approved;
    pushes the plan executed. Runs in the ``stream_lifecycle`` pool."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("pool", LIFECYCLE_POOL)
        super().__init__(**kwargs)

    def execute(self, context: Context) -> dict[str, Any]:
        hook = StreamwardenHook()
        approved = _plan(context, PLAN_TASK)
        return run_step(context, lambda: steps.hold_and_stop(hook.settings, approved, owner=owner(context),
                                                             stop=hook.stop_stream).to_json())


class ArchiveCheckpointOperator(BaseOperator):
    """Moves the checkpoint into ``<checkpoint_root>/archive/<time>-<recovery id>/`` (never deleted)."""

    def execute(self, context: Context) -> str | None:
        executed = _plan(context, EXECUTED_TASK)
        archived = run_step(context, lambda: steps.archive_checkpoint(DeltaTablesHook().settings, executed))
        return None if archived is None else str(archived)


class RestoreTablesOperator(BaseOperator):
    """Restores every table to its target version with its offset claims (one Delta commit each, checked)."""

    def execute(self, context: Context) -> list[dict[str, Any]]:
        executed = _plan(context, EXECUTED_TASK)
        restored = run_step(context, lambda: steps.restore_tables(DeltaTablesHook().settings, executed))
        return [r.to_json() for r in restored]


class SeedCheckpointOperator(BaseOperator):
    """Creates the new checkpoint holding only the offsets to start from; records the recovery in
    ``<run_root>/recoveries.jsonl``."""

    def execute(self, context: Context) -> dict[str, dict[str, int]]:
        executed = _plan(context, EXECUTED_TASK)
        return run_step(context, lambda: steps.seed_checkpoint(DeltaTablesHook().settings, executed))


class StartStreamOperator(BaseOperator):
    """Releases the hold and starts the stream on the new checkpoint through the warden's launcher (the
    stream_supervisor DAG watches it from then on); returns its pid. Runs in the ``stream_lifecycle`` pool."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("pool", LIFECYCLE_POOL)
        super().__init__(**kwargs)

    def execute(self, context: Context) -> int | None:
        hook = StreamwardenHook()

        def work() -> int | None:
            release_hold(hook.settings, owner(context))
            try:
                return hook.start_stream()
            except StreamAlreadyRunningError as exc:  # a re-run after the start
                log.info("%s", exc)
                return exc.holder.pid if exc.holder else None
        return run_step(context, work)


class ValidateAfterRecoveryOperator(BaseOperator):
    """Runs validate_output's checks on the recovered tables (the same code, report and last validated
    versions); fails unless they pass. Returns the report's summary."""

    def execute(self, context: Context) -> dict[str, Any]:
        hook = DeltaTablesHook()
        recorded = run_step(context, lambda: validation_steps.run(hook.settings, hook.validation,
                                                                 restarts=hook.restarts))
        summary: dict[str, Any] = recorded.report.summary(recorded.path)
        if not recorded.report.passed:
            raise AirflowFailException(f"validation after the recovery found {recorded.report.classes()}; "
                                       f"report {recorded.path}")
        return summary


class RecoveryReportOperator(BaseOperator):
    """Runs whatever happened: reports the outcome (dry run, rejected or timed out, recovered with the
    validation's verdict, or the failed step with its evidence) in the log and in
    ``<run_root>/recoveries/<id>/report.json``, alerts, and fails the run when a step failed."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(trigger_rule="all_done", **kwargs)

    def execute(self, context: Context) -> dict[str, Any]:
        ti = context["ti"]
        hook = DeltaTablesHook()
        source = owner(context)
        planned = ti.xcom_pull(task_ids=PLAN_TASK)
        executed = ti.xcom_pull(task_ids=EXECUTED_TASK)
        results = {task: ti.xcom_pull(task_ids=task) for task in STEP_IDS}
        outcomes = step_outcomes(context, STEP_IDS)
        if failed := alert_failures(outcomes, hook.send_alert, lambda failure, task: step_failed_alert(
                "recover_stream", "RECOVERY_FAILED", failure, source=source, task=task, actions=_ACTIONS,
                default_action="Read the task log and the failure document, fix the cause, then clear the "
                               "failed task of this run (every step is idempotent).")):
            first = failed[0]
            steps.write_report(hook.settings, planned, {"outcome": "failed", "task": first.task_id,
                                                        "failure": first.failure, "results": results})
            raise AirflowFailException(f"{first.describe()}; alert sent")
        if died := failed_steps(outcomes):  # killed before it could push a document
            steps.write_report(hook.settings, planned, {"outcome": f"failed: {died}", "results": results})
            raise AirflowFailException(f"recovery failed: {died}; clear the failed task of this run (every step is "
                                       "idempotent)")
        if planned is None:
            raise AirflowFailException(f"{PLAN_TASK} did not run (see check_params)")
        plan = RecoveryPlan.from_json(planned)
        answered = ti.xcom_pull(task_ids=APPROVAL_TASK, key=ANSWER_KEY)
        answer = None if answered is None else ApprovalAnswer.from_json(answered)
        action = "read the report, then trigger recover_stream again if needed"
        if plan.request.dry_run:
            outcome, action = "dry run: nothing changed", "none"
        elif executed is None:
            outcome, action = not_approved(answer, "recover_stream")
            outcome = f"not approved: {outcome}"
        elif results["validate"] is None:
            outcome = "recovered, not validated (a step did not run; see the run)"
        else:
            outcome, action = "recovered and validated", "none"
        report = steps.write_report(hook.settings, planned, {
            "outcome": outcome, "results": results, "approval": None if answer is None else answer.to_json()})
        hook.send_alert(Alert("info" if "validated" in outcome or "nothing" in outcome else "warning",
                              f"recover_stream {plan.recovery_id}: {outcome}", {"label": "RECOVERY"}, None, None,
                              {}, action, source=source))
        log.info("recovery %s: %s\n%s\nreport %s", plan.recovery_id, outcome,
                 RecoveryPlan.from_json(executed or planned).text(), report)
        return {"recovery_id": plan.recovery_id, "outcome": outcome, "report": str(report),
                "validation": results["validate"], "restored": results["restore_tables"],
                "resume": results["seed_checkpoint"]}

