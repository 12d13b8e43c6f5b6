"""The warden's steps after the health check: decide, restart the stream, alert a person.

Restart runs in the ``stream_lifecycle`` pool (one slot), so two lifecycle steps never overlap; the
stream's lease is the last guard against two jobs.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from airflow.sdk import BaseBranchOperator, BaseOperator, Context
from airflow.sdk.exceptions import AirflowFailException

from streamwarden.warden.alerts import Alert, alerts_path, already_sent
from streamwarden.warden.decision import Action, Decision, decide
from streamwarden.warden.health import HealthVerdict
from streamwarden.warden.launcher import StreamAlreadyRunningError, StreamLaunchFailedError, running_holder
from streamwarden.warden.stop import LIFECYCLE_POOL
from streamwarden_airflow.hooks.stream import StreamwardenHook


def _params(context: Context) -> dict[str, Any]:
    return dict(context.get("params") or {})


def _source(context: Context) -> str:
    run = context.get("dag_run")
    return f"{run.dag_id}/{run.run_id}" if run is not None else ""


class DecideOperator(BaseBranchOperator):
    """Branches on the verdict: ``healthy``, ``notify_degraded``, ``wait_for_backoff`` or ``escalate``.

    The decision (action, reason, next action) is pushed to XCom under ``decision``.
    """

    BRANCHES = {Action.NONE: "healthy", Action.ALERT: "notify_degraded", Action.RESTART: "wait_for_backoff",
                Action.ESCALATE: "escalate"}

    def __init__(self, *, health_task_id: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.health_task_id = health_task_id

    def choose_branch(self, context: Context) -> str | Iterable[str]:
        verdict = HealthVerdict.from_json(context["ti"].xcom_pull(task_ids=self.health_task_id))
        hook = StreamwardenHook()
        params = _params(context)
        decision = decide(verdict, hook.history(), hook.warden, time.time(),
                          force_restart=bool(params.get("force_restart")), reason=str(params.get("reason") or ""))
        self.log.info("verdict %s -> %s: %s; next: %s", verdict.label, decision.action.value, decision.reason,
                      decision.next_action)
        context["ti"].xcom_push(key="decision", value=decision.to_json())
        return self.BRANCHES[decision.action]


class RestartStreamOperator(BaseOperator):
    """Stops what is left of the stream (drain, SIGTERM, SIGKILL; a stopped process is killed at once),
    then starts it detached with the same checkpoint, and returns once it holds the lease.

    A stream started meanwhile by someone else (another run, an operator) is left alone: the holder seen
    now is not the one the verdict judged. Each launch counts towards the backoff and the breaker.
    """

    def __init__(self, *, health_task_id: str, **kwargs: Any) -> None:
        kwargs.setdefault("pool", LIFECYCLE_POOL)
        super().__init__(**kwargs)
        self.health_task_id = health_task_id

    def execute(self, context: Context) -> dict[str, Any]:
        verdict = HealthVerdict.from_json(context["ti"].xcom_pull(task_ids=self.health_task_id))
        hook = StreamwardenHook()
        force = bool(_params(context).get("force_restart"))
        holder = running_holder(hook.settings)
        if holder is not None and not force and holder.pid != verdict.pid:
            self.log.info("pid %d took the lease since the check (verdict was about pid %s); not restarting",
                          holder.pid, verdict.pid)
            return {"started": False, "pid": holder.pid, "stopped": None}
        self.log.info("restarting the stream (%s; reason: %s)", verdict.label,
                      _params(context).get("reason") or "scheduled check")
        stopped = hook.stop_stream()
        self.log.info("stop: %s after %.1fs", stopped.method.value, stopped.seconds)
        try:
            pid = hook.start_stream()
        except StreamAlreadyRunningError as exc:
            self.log.info("%s; not starting another", exc)
            return {"started": False, "pid": exc.holder.pid if exc.holder else None, "stopped": stopped.to_json()}
        except StreamLaunchFailedError as exc:
            hook.record_start(time.time())
            hook.send_alert(Alert.from_verdict("critical", f"stream launch failed (exit {exc.exit_code})",
                                               verdict.to_json(), f"read {exc.log_path}", source=_source(context)))
            raise
        hook.record_start(time.time())
        self.log.info("the stream runs as pid %d; logs under %s", pid, hook.settings.root("run") / "logs")
        hook.send_alert(Alert.from_verdict("info", f"stream restarted as pid {pid} ({verdict.label})",
                                           verdict.to_json(), "none: the next check judges the new run",
                                           source=_source(context)))
        return {"started": True, "pid": pid, "stopped": stopped.to_json()}


class AlertOperator(BaseOperator):
    """Sends the decision's alert; with ``fail_run`` the task then fails, so the run shows red.

    An escalation is sent once per cause (the failure document, or the start that opened the breaker);
    later runs only fail again, pointing at the alert already sent.
    """

    def __init__(self, *, health_task_id: str, decide_task_id: str, fail_run: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.health_task_id = health_task_id
        self.decide_task_id = decide_task_id
        self.fail_run = fail_run

    def execute(self, context: Context) -> dict[str, Any]:
        ti = context["ti"]
        verdict: dict[str, Any] = ti.xcom_pull(task_ids=self.health_task_id)
        decision = Decision.from_json(ti.xcom_pull(task_ids=self.decide_task_id, key="decision"))
        hook = StreamwardenHook()
        alert = Alert.from_verdict(decision.severity, decision.reason, verdict, decision.next_action,
                                   source=_source(context), key=self._cause(verdict, decision, hook))
        if alert.key is not None and already_sent(alerts_path(hook.settings), alert.key):
            self.log.warning("already alerted for this cause (%s):\n%s", alert.key, alert.text())
            deliveries: dict[str, str] = {}
        else:
            deliveries = hook.send_alert(alert)
        if self.fail_run:
            raise AirflowFailException(f"{decision.reason}. Next: {decision.next_action}")
        return {"alert": alert.to_json(), "deliveries": deliveries}

    @staticmethod
    def _cause(verdict: dict[str, Any], decision: Decision, hook: StreamwardenHook) -> str | None:
        """What an escalation is about: the breaker's last start, or the failure document."""
        if decision.breaker_open:
            starts = hook.history().starts
            return f"breaker@{starts[-1] if starts else 0}"
        failure = verdict.get("failure")
        return f"failure@{failure['occurred_at']}" if failure and decision.action is Action.ESCALATE else None
