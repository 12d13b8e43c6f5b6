"""The warden's steps after the health check as operators: decide, restart the stream, alert a person.

The rules live in :mod:`streamwarden.warden.decision` and :mod:`streamwarden.warden.actions`; these only read
XCom and params, hand the core the hook's ways to start, stop and alert, and return the outcome (XCom).
Restart runs in the ``stream_lifecycle`` pool (one slot), so two lifecycle steps never overlap; the
stream's lease is the last guard against two jobs.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from airflow.sdk import BaseBranchOperator, BaseOperator, Context
from airflow.sdk.exceptions import AirflowFailException

from streamwarden.alerts import Alert
from streamwarden.runfiles.hold import read_hold
from streamwarden.warden.actions import alert_decision, restart_stream
from streamwarden.warden.decision import Action, Decision, decide
from streamwarden.warden.health import HealthVerdict
from streamwarden.warden.lag_history import append_lag_sample
from streamwarden.warden.standby import keep_standby
from streamwarden.warden.stop import LIFECYCLE_POOL
from streamwarden.warden.watch import Sighting
from streamwarden_airflow.hooks.stream import StreamwardenHook
from streamwarden_airflow.operators.run_source import run_source

RUN_REASON = "{{ params.reason | default('', true) }}"  # absent, null and empty alike
"""The default ``reason``: the run's ``reason`` param (empty when the DAG has none)."""


def _force_restart(context: Context) -> bool:
    return bool((context.get("params") or {}).get("force_restart"))


def watch_sighting(context: Context) -> Sighting | None:
    """What the continuous watch reported, when its asset event started this run (else None)."""
    events = context.get("triggering_asset_events") or {}
    for asset_events in events.values():
        for event in asset_events:
            payload = (event.extra or {}).get("payload")
            if isinstance(payload, dict) and "sign" in payload:
                return Sighting.from_json(payload)
    return None


def _reason(context: Context, given: str) -> str:
    """The run's reason: the operator's (the ``reason`` param), else the watch's sighting."""
    sighting = watch_sighting(context)
    return given or (f"the watch saw {sighting.text()}" if sighting is not None else "")


def _verdict(context: Context, health_task_id: str) -> HealthVerdict:
    return HealthVerdict.from_json(context["ti"].xcom_pull(task_ids=health_task_id))


class CheckHealthOperator(BaseOperator):
    """Judges the stream's health once and returns the verdict (JSON, XCom); the log shows it as a table.

    One look, no waiting: a STARTING stream is left alone by the decision and judged again by the next run (or
    woken by the watch). The lag history (Burrow's window) is kept with every verdict.
    """

    def execute(self, context: Context) -> dict[str, Any]:
        sighting = watch_sighting(context)
        if sighting is not None:
            self.log.info("woken by the stream watch: %s", sighting.text())
        hook = StreamwardenHook()
        assessment = hook.assess()
        self.log.info("stream health:\n%s", assessment.verdict.table())
        assessment.commit()
        append_lag_sample(hook.settings, assessment.verdict, time.time())  # the Streamwarden page's lag chart
        return assessment.verdict.to_json()


class DecideOperator(BaseBranchOperator):
    """Branches on the verdict: ``healthy``, ``notify_degraded``, ``wait_for_backoff`` or ``escalate``.

    The decision (action, reason, next action) is pushed to XCom under ``decision``. The run's
    ``force_restart`` param restarts whatever the verdict, the backoff and the breaker say.

    :param health_task_id: the task whose return value is the health verdict (``CheckHealthOperator``)
    :param reason: why the run was triggered, given in a forced restart's decision (templated; default:
        the run's ``reason`` param)
    """

    template_fields: Sequence[str] = ("reason",)
    BRANCHES = {Action.NONE: "healthy", Action.ALERT: "notify_degraded", Action.RESTART: "wait_for_backoff",
                Action.ESCALATE: "escalate"}

    def __init__(self, *, health_task_id: str, reason: str = RUN_REASON, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.health_task_id = health_task_id
        self.reason = reason

    def choose_branch(self, context: Context) -> str | Iterable[str]:
        verdict = _verdict(context, self.health_task_id)
        hook = StreamwardenHook()
        decision = decide(verdict, hook.history(), hook.warden, time.time(), force_restart=_force_restart(context),
                          reason=self.reason, hold=read_hold(hook.settings))
        self.log.info("verdict %s -> %s: %s; next: %s", verdict.label, decision.action.value, decision.reason,
                      decision.next_action)
        context["ti"].xcom_push(key="decision", value=decision.to_json())
        return self.BRANCHES[decision.action]


class RestartStreamOperator(BaseOperator):
    """Stops what is left of the stream (drain, SIGTERM, SIGKILL; a stopped process is killed at once),
    then starts it detached through spark-submit with the same checkpoint, and returns once it holds the
    lease: ``{"started", "pid", "stopped"}`` (:class:`~streamwarden.warden.actions.RestartOutcome`).

    A stream started meanwhile by someone else (another run, an operator) is left alone unless the run's
    ``force_restart`` param is set: the holder seen now is not the one the verdict judged. Each launch
    counts towards the backoff and the breaker, and is alerted; a failed launch fails the task.

    :param health_task_id: the task whose return value is the health verdict (``CheckHealthOperator``)
    :param reason: why the stream is restarted, for the log (templated; default: the run's ``reason`` param)
    :param spark_conn_id: the Spark connection spark-submit is built from; its master must equal
        ``STREAMWARDEN_SPARK_MASTER``
    """

    template_fields: Sequence[str] = ("reason",)

    def __init__(self, *, health_task_id: str, reason: str = RUN_REASON,
                 spark_conn_id: str = StreamwardenHook.default_conn_name, **kwargs: Any) -> None:
        kwargs.setdefault("pool", LIFECYCLE_POOL)
        super().__init__(**kwargs)
        self.health_task_id = health_task_id
        self.reason = reason
        self.spark_conn_id = spark_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        hook = StreamwardenHook(spark_conn_id=self.spark_conn_id)
        outcome = restart_stream(hook.settings, _verdict(context, self.health_task_id), start=hook.start_stream,
                                 stop=hook.stop_stream, send=hook.send_alert, force=_force_restart(context),
                                 reason=_reason(context, self.reason), source=run_source(context))
        return outcome.to_json()


class KeepStandbyOperator(BaseOperator):
    """Keeps one warm standby beside the running stream when ``STREAMWARDEN_WARDEN_STANDBY`` is on: launches one
    when none waits (the task ends once it holds the standby lease); returns what it found or did. When the
    running stream is the last standby, which took over from a stream that died, that is alerted (info, once per
    takeover). A standby that cannot be launched fails the task (the stream itself runs on).

    :param health_task_id: the task whose return value is the health verdict (the alert's evidence)
    :param spark_conn_id: the Spark connection spark-submit is built from
    """

    def __init__(self, *, health_task_id: str, spark_conn_id: str = StreamwardenHook.default_conn_name,
                 **kwargs: Any) -> None:
        kwargs.setdefault("pool", LIFECYCLE_POOL)
        kwargs.setdefault("trigger_rule", "none_failed_min_one_success")
        super().__init__(**kwargs)
        self.health_task_id = health_task_id
        self.spark_conn_id = spark_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        hook = StreamwardenHook(spark_conn_id=self.spark_conn_id)
        outcome = keep_standby(hook.settings, hook.warden.standby, lambda: hook.start_stream(standby=True))
        self.log.info("standby: %s%s", outcome.state.value, f" (pid {outcome.pid})" if outcome.pid else "")
        if outcome.took_over is not None:
            verdict = _verdict(context, self.health_task_id)
            hook.send_alert_once(Alert.from_verdict(
                "info", f"the warm standby took over the stream at {outcome.took_over} (pid {verdict.pid}): the "
                        "stream before it had died", verdict.to_json(),
                "read the dead stream's log under run/logs (why it died); a new standby waits" if outcome.pid
                else "read the dead stream's log under run/logs", source=run_source(context),
                key=f"takeover@{outcome.took_over}"))
        return outcome.to_json()


class AlertOperator(BaseOperator):
    """Sends the decision's alert and returns it with its deliveries; with ``fail_run`` the task then
    fails, so the run shows red.

    An escalation is sent once per cause (the failure document, or the start that opened the breaker);
    later runs only fail again, pointing at the alert already sent.

    :param health_task_id: the task whose return value is the health verdict (``CheckHealthOperator``)
    :param decide_task_id: the task that pushed the decision (``DecideOperator``)
    :param fail_run: fail the task after alerting (an escalation: a person must act)
    """

    def __init__(self, *, health_task_id: str, decide_task_id: str, fail_run: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.health_task_id = health_task_id
        self.decide_task_id = decide_task_id
        self.fail_run = fail_run

    def execute(self, context: Context) -> dict[str, Any]:
        decision = Decision.from_json(context["ti"].xcom_pull(task_ids=self.decide_task_id, key="decision"))
        hook = StreamwardenHook()
        outcome = alert_decision(hook.settings, _verdict(context, self.health_task_id), decision,
                                 send=hook.send_alert, source=run_source(context))
        if self.fail_run:
            raise AirflowFailException(f"{decision.reason}. Next: {decision.next_action}")
        return outcome.to_json()
