"""The warden's steps after a verdict: restart the stream and alert a person, as plain functions.

How the stream is started and stopped and how an alert is delivered is passed in (:data:`StartStream`,
:data:`StopStream`, :data:`SendAlert`): the Airflow operators pass spark-submit from a Spark connection and
e-mail through an SMTP connection; the rules (leave a stream someone else started alone, record every
launch, alert an escalation once per cause) live here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from streamwarden.alerts import Alert, already_sent
from streamwarden.runfiles.hold import refuse_if_held
from streamwarden.settings import Settings
from streamwarden.warden.decision import Action, Decision
from streamwarden.warden.health import HealthVerdict
from streamwarden.warden.launcher import (
    StreamAlreadyRunningError,
    StreamLaunchFailedError,
    read_launch_record,
    running_holder,
)
from streamwarden.warden.restart_policy import load_history, save_history
from streamwarden.warden.stop import StopOutcome

log = logging.getLogger(__name__)

StartStream = Callable[[], int]
"""Launches the stream; the pid of its driver once it holds the lease (raises as
:func:`~streamwarden.warden.launcher.start_stream_detached` does)."""
StopStream = Callable[[], StopOutcome]
"""Stops what is left of the stream (as :func:`~streamwarden.warden.stop.stop_stream` does)."""
SendAlert = Callable[[Alert], dict[str, str]]
"""Delivers and records an alert; the outcome per back-end (as :func:`~streamwarden.alerts.dispatch`)."""


@dataclass(frozen=True)
class RestartOutcome:
    """What :func:`restart_stream` did: whether it started the stream, the pid of the driver running now,
    and how the previous one was stopped (``None``: nothing was stopped, the stream was left alone)."""

    started: bool
    pid: int | None
    stopped: StopOutcome | None
    startup_s: float | None = None  # launch until the new driver held the lease

    def to_json(self) -> dict[str, Any]:
        return {"started": self.started, "pid": self.pid, "startup_s": self.startup_s,
                "stopped": None if self.stopped is None else self.stopped.to_json()}


@dataclass(frozen=True)
class AlertOutcome:
    """The alert :func:`alert_decision` built and its deliveries (none when its cause was alerted before)."""

    alert: Alert
    deliveries: dict[str, str]
    repeated: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"alert": self.alert.to_json(), "deliveries": self.deliveries}


def restart_stream(settings: Settings, verdict: HealthVerdict, *, start: StartStream, stop: StopStream,
                   send: SendAlert, force: bool = False, reason: str = "", source: str = "") -> RestartOutcome:
    """Stop what is left of the stream, then start it again with the same checkpoint.

    A stream someone else started since ``verdict`` was judged (another run, a person) is left alone,
    unless ``force``: the lease holder seen now is not the one the verdict is about. Nothing is stopped
    while a recovery or an upgrade holds the stream (:class:`~streamwarden.runfiles.hold.StreamHeldError`).
    Every launch, a failed one too, is recorded in the restart history (backoff, breaker) and alerted (with
    how long the stop took and how long the new driver took to hold the lease), except the very first start on a
    run root (nothing had run: no news); a failed launch is re-raised.
    ``source`` (which DAG run) goes into the alerts.
    """
    refuse_if_held(settings, "restarting the stream")
    holder = running_holder(settings)
    if holder is not None and not force and holder.pid != verdict.pid:
        log.info("pid %d took the lease since the check (verdict was about pid %s); not restarting",
                 holder.pid, verdict.pid)
        return RestartOutcome(False, holder.pid, None)
    log.info("restarting the stream (%s; reason: %s)", verdict.label, reason or "scheduled check")
    # nothing ever ran on this run root: no launch recorded, no heartbeat written
    first = read_launch_record(settings) is None and not settings.run_paths.heartbeat.exists()
    stopped = stop()
    log.info("stop: %s after %.1fs", stopped.method.value, stopped.seconds)
    launched = time.monotonic()
    try:
        pid = start()
    except StreamAlreadyRunningError as exc:
        log.info("%s; not starting another", exc)
        return RestartOutcome(False, exc.holder.pid if exc.holder else None, stopped)
    except StreamLaunchFailedError as exc:
        _record_start(settings)
        send(Alert.from_verdict("critical", f"stream launch failed (exit {exc.exit_code})", verdict.to_json(),
                                f"read {exc.log_path}", source=source))
        raise
    startup = round(time.monotonic() - launched, 1)
    _record_start(settings)
    log.info("the stream runs as pid %d (lease taken %.1fs after launch); logs under %s", pid, startup,
             settings.run_paths.logs)
    if first:  # a first start is no news: nothing to alert until the stream has run
        log.info("first start of the stream on %s: not alerted", settings.root("run"))
        return RestartOutcome(True, pid, stopped, startup)
    because = f"; {reason}" if reason else ""
    send(Alert.from_verdict("info", f"stream restarted as pid {pid} ({verdict.label}{because}): stopped in "
                                    f"{stopped.seconds:.1f}s, lease taken {startup:.1f}s after launch",
                            verdict.to_json(), "none: the next check judges the new run", source=source))
    return RestartOutcome(True, pid, stopped, startup)


def alert_decision(settings: Settings, verdict: HealthVerdict, decision: Decision, *, send: SendAlert,
                   source: str = "") -> AlertOutcome:
    """Tell a person what was decided about ``verdict``, and what to do next.

    An escalation is sent once per cause (the failure document, or the start that opened the breaker):
    when an alert with the same cause is recorded, this one is only logged, not delivered nor recorded.
    """
    alert = Alert.from_verdict(decision.severity, decision.reason, verdict.to_json(), decision.next_action,
                               source=source, key=_cause(settings, verdict, decision))
    if alert.key is not None and already_sent(settings.run_paths.alerts, alert.key):
        log.warning("already alerted for this cause (%s):\n%s", alert.key, alert.text())
        return AlertOutcome(alert, {}, repeated=True)
    return AlertOutcome(alert, send(alert))


def _cause(settings: Settings, verdict: HealthVerdict, decision: Decision) -> str | None:
    """What an escalation is about: the breaker's last start, or the failure document (other alerts: none)."""
    if decision.breaker_open:
        starts = load_history(settings).starts
        return f"breaker@{starts[-1] if starts else 0}"
    if verdict.failure is not None and decision.action is Action.ESCALATE:
        return f"failure@{verdict.failure.occurred_at}"
    return None


def _record_start(settings: Settings) -> None:
    save_history(settings, load_history(settings).with_start(time.time()))
