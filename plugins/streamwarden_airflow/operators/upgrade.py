"""The steps of ``upgrade_stream`` as operators: check, drain, copy, evolve, activate, start, roll back, report.

The work is done by :mod:`streamwarden.upgrade.steps`; these read the run's checked request (XCom of
``check_params``), open the run's journal and hand the core the hook's ways to start and stop the stream. A step
that fails pushes its failure document (:data:`~streamwarden_airflow.operators.failing.FAILURE_KEY`), so that
``report_and_alert`` alerts with the class, the evidence and the next action. Steps that start or stop the stream
run in the ``stream_lifecycle`` pool. The health watch is
:class:`~streamwarden_airflow.sensors.upgrade.UpgradeHealthSensor`.
"""

from __future__ import annotations

import logging
from typing import Any

from airflow.sdk import BaseOperator, Context
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from streamwarden.upgrade import steps
from streamwarden.upgrade.journal import Journal, run_key
from streamwarden.upgrade.report import outcome_of
from streamwarden.upgrade.request import UpgradeRequest, request_from_params
from streamwarden.warden.stop import LIFECYCLE_POOL
from streamwarden_airflow.hooks.stream import StreamwardenHook
from streamwarden_airflow.operators.failing import FAILURE_KEY, run_step
from streamwarden_airflow.operators.run_source import run_source

log = logging.getLogger("streamwarden.upgrade")
PARAMS_TASK = "check_params"
STEPS = ("check_params", "check_compatibility", "hold_and_drain", "copy_checkpoint", "evolve_schema",
         "activate_release", "start_new", "watch_health", "rollback")


def run_ids(context: Context) -> tuple[str, str]:
    """The run's hold owner (``upgrade_stream/<run id>``) and its journal key."""
    run = context.get("dag_run")
    return run_source(context, "upgrade_stream/manual"), run_key(run.run_id if run is not None else "manual")


def checked_request(context: Context) -> UpgradeRequest:
    return UpgradeRequest.from_json(context["ti"].xcom_pull(task_ids=PARAMS_TASK))


def proceed_unless_dry_run(**context: Any) -> bool:
    """``stop_if_dry_run``'s callable: go on only when the checked request is not a dry run."""
    document = context["ti"].xcom_pull(task_ids=PARAMS_TASK)
    return document is not None and not document["dry_run"]


class CheckUpgradeParamsOperator(BaseOperator):
    """Checks the run's Params (release, health_minutes, dry_run, reason) and the release file; pushes the checked
    request. A bad one fails here, naming it; nothing is read from the stream or changed."""

    def execute(self, context: Context) -> dict[str, Any]:
        def work() -> dict[str, Any]:
            request = request_from_params(context.get("params") or {}, StreamwardenHook().settings)
            log.info("%s; reason: %r", request.describe(), request.reason)
            return request.to_json()
        return run_step(context, work)


class CheckCompatibilityOperator(BaseOperator):
    """Checks the release against the checkpoint's state layout and the tables' columns; pushes the result.
    Fails (CONFIG) naming each refusal; nothing is changed."""

    def execute(self, context: Context) -> dict[str, Any]:
        request = checked_request(context)
        return run_step(context, lambda: steps.check(StreamwardenHook().settings, request).to_json())


class _LifecycleStep(BaseOperator):
    """A step that may start or stop the stream: in the ``stream_lifecycle`` pool."""

    def __init__(self, *, spark_conn_id: str = StreamwardenHook.default_conn_name, **kwargs: Any) -> None:
        kwargs.setdefault("pool", LIFECYCLE_POOL)
        super().__init__(**kwargs)
        self.spark_conn_id = spark_conn_id

    def hook(self) -> StreamwardenHook:
        """A hook with the settings in force now (the active release)."""
        return StreamwardenHook(spark_conn_id=self.spark_conn_id)

    def start(self) -> int:
        return self.hook().start_stream()


class HoldAndDrainOperator(_LifecycleStep):
    """Holds the stream for this run (the warden, the launcher and maintenance leave it alone), then stops it:
    drain, then SIGTERM, then SIGKILL."""

    def execute(self, context: Context) -> dict[str, Any]:
        owner, key = run_ids(context)
        request = checked_request(context)
        hook = self.hook()
        journal = Journal.open(hook.settings, key)
        reason = f"upgrade to release {request.release.name}: {request.reason or 'no reason given'}"
        return run_step(context, lambda: steps.hold_and_drain(hook.settings, journal, owner=owner, reason=reason,
                                                              stop=hook.stop_stream))


class CopyCheckpointOperator(BaseOperator):
    """Records the rollback point: a copy of the checkpoint under ``<checkpoint_root>/archive/``, each table's
    Delta version and the release in force."""

    def execute(self, context: Context) -> dict[str, Any]:
        owner, key = run_ids(context)
        settings = StreamwardenHook().settings
        return run_step(context, lambda: steps.copy_checkpoint(settings, Journal.open(settings, key), owner=owner))


class EvolveSchemaOperator(BaseOperator):
    """Adds the release's new nullable columns to ``session_rows`` (Delta schema evolution); skips those present."""

    def execute(self, context: Context) -> dict[str, Any]:
        owner, key = run_ids(context)
        request = checked_request(context)
        settings = StreamwardenHook().settings
        return run_step(context, lambda: steps.evolve_schema(settings, request, Journal.open(settings, key),
                                                             owner=owner))


class ActivateReleaseOperator(BaseOperator):
    """Makes the release the active one: every launch of the stream from now on runs it."""

    def execute(self, context: Context) -> dict[str, Any]:
        owner, key = run_ids(context)
        request = checked_request(context)
        settings = StreamwardenHook().settings
        return run_step(context, lambda: steps.activate_release(settings, request, Journal.open(settings, key),
                                                                owner=owner))


class StartNewVersionOperator(_LifecycleStep):
    """Releases the hold, starts the stream detached with the active release (spark-submit), holds it again for
    the health watch; ends once the new driver holds the checkpoint lease."""

    def execute(self, context: Context) -> dict[str, Any]:
        owner, key = run_ids(context)
        request = checked_request(context)
        settings = self.hook().settings
        reason = f"upgrade to release {request.release.name}: watching its health"
        return run_step(context, lambda: steps.start_new(settings, Journal.open(settings, key), owner=owner,
                                                         reason=reason, start=self.start))


class RollbackOperator(_LifecycleStep):
    """Runs when a step from ``hold_and_drain`` on failed (``one_failed``): holds and stops the stream, restores
    each table to its rollback version with the offsets it claims, puts the checkpoint copy back (the new
    version's goes to the archive), makes the previous release active again, starts the old version and confirms
    it runs. Skipped when this run never held the stream (nothing changed)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trigger_rule", "one_failed")
        super().__init__(**kwargs)

    def execute(self, context: Context) -> dict[str, Any]:
        owner, key = run_ids(context)
        hook = self.hook()
        journal = Journal.open(hook.settings, key)
        if journal.get("hold") is None:
            raise AirflowSkipException("this run never held the stream: nothing to roll back")

        def work() -> dict[str, Any]:
            done = steps.rollback(hook.settings, hook.warden, journal, owner=owner,
                                  reason="upgrade rollback: back to the previous release", start=self.start,
                                  stop=hook.stop_stream)
            return done or {}
        return run_step(context, work)


class UpgradeReportOperator(BaseOperator):
    """Runs whatever happened: the outcome (CHECKED, REFUSED, UPGRADED, ROLLED_BACK, ROLLBACK_FAILED) in the log
    and the journal, and alerted either way with the failure class, the evidence and the next action; fails the
    run unless the release was checked (dry run) or runs healthy."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trigger_rule", "all_done")
        super().__init__(**kwargs)

    def execute(self, context: Context) -> dict[str, Any]:
        ti = context["ti"]
        _, key = run_ids(context)
        hook = StreamwardenHook()
        failures = {task: doc for task in STEPS if (doc := ti.xcom_pull(task_ids=task, key=FAILURE_KEY))}
        checked = ti.xcom_pull(task_ids=PARAMS_TASK)
        request = None if checked is None else UpgradeRequest.from_json(checked)
        params = context.get("params") or {}
        journal = Journal.open(hook.settings, key)
        outcome = outcome_of(release=request.release.name if request else params.get("release"),
                             dry_run=request.dry_run if request else True, failures=failures,
                             journal=journal.document, health_minutes=request.health_minutes if request else None)
        if request is not None and not request.dry_run and journal.get("hold") is not None:
            journal.put("outcome", outcome.to_json())
        failure = failures.get("rollback") or next(iter(failures.values()), None)
        journal_path = str(journal.path) if journal.path.exists() else None
        alert = outcome.alert(source=run_source(context), journal_path=journal_path, failure=failure)
        log.info("upgrade outcome %s:\n%s", outcome.status, "\n".join(outcome.evidence))
        hook.send_alert(alert)
        if not outcome.succeeded:
            raise AirflowFailException(f"{outcome.summary}. Next: {outcome.next_action}")
        return outcome.to_json()
