"""The warden's steps after a verdict on real files: restarts of a stand-in stream that holds the real lease
(launched detached, stopped by the stop marker), alerts delivered to the log and recorded in alerts.jsonl."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import NoReturn

import pytest

from streamwarden.alerts import LogNotifier, dispatch, read_alerts
from streamwarden.failures import FailureClass, FailureDocument
from streamwarden.runfiles.lease import CheckpointLease
from streamwarden.settings import Settings, load_settings
from streamwarden.warden.actions import RestartOutcome, SendAlert, StartStream, alert_decision, restart_stream
from streamwarden.warden.decision import Action, decide
from streamwarden.warden.health import HealthVerdict, Overall
from streamwarden.warden.launcher import CommandBuilder, StreamLaunchFailedError, start_stream_detached
from streamwarden.warden.restart_policy import RestartHistory, load_history, save_history
from streamwarden.warden.settings import load_warden_settings
from streamwarden.warden.stop import StopMethod, StopOutcome, stop_stream

WARDEN = load_warden_settings(max_restarts_per_hour=3)


@pytest.fixture()
def settings(tmp_path: Path) -> Settings:
    return load_settings(home=tmp_path / "home")


@pytest.fixture()
def send(settings: Settings) -> SendAlert:
    """Delivers to the log and records in ``<run_root>/alerts.jsonl``, as the Airflow hook does."""
    return partial(dispatch, backends=[LogNotifier(logging.getLogger("test.actions"))],
                   record=settings.run_paths.alerts)


@pytest.fixture()
def launch(settings: Settings, stand_in: Callable[[str], CommandBuilder]) -> Callable[[str], StartStream]:
    """``launch(mode)``: starts the stand-in stream detached in that mode, through the real launcher."""
    return lambda mode: partial(start_stream_detached, settings, build_command=stand_in(mode), lease_timeout=30)


def _stop(settings: Settings) -> StopOutcome:
    return stop_stream(settings, drain_timeout=10, term_timeout=5)


def _never() -> NoReturn:
    raise AssertionError("must not be called")


def _verdict(overall: Overall, pid: int | None = None, failure: FailureDocument | None = None) -> HealthVerdict:
    return HealthVerdict(overall, [f"judged {overall.value}"], datetime.now(UTC).isoformat(), alive=pid is not None,
                         pid=pid, failure=failure)


def _sent(settings: Settings) -> list[tuple[str, str, str]]:
    return [(a["severity"], a["summary"], a["source"]) for a in read_alerts(settings.run_paths.alerts)]


def test_restart_stops_the_judged_stream_starts_a_new_one_and_records_each_start(
        settings: Settings, launch: Callable[[str], StartStream], send: SendAlert) -> None:
    first = restart_stream(settings, _verdict(Overall.DEAD), start=launch("drain"), stop=partial(_stop, settings),
                           send=send, source="run1")
    assert first.started and first.stopped == StopOutcome(StopMethod.NOT_RUNNING, None, 0.0)

    second = restart_stream(settings, _verdict(Overall.HUNG, pid=first.pid), start=launch("drain"),
                            stop=partial(_stop, settings), send=send, source="run2", reason="hung")
    assert second.started and second.pid not in (None, first.pid)
    assert second.to_json()["stopped"]["method"] == "drained" and second.to_json()["stopped"]["pid"] == first.pid
    assert len(load_history(settings).starts) == 2
    assert first.startup_s is not None and second.startup_s is not None
    sent = _sent(settings)  # the first start on this run root is no news: only the restart is alerted
    assert [(severity, source) for severity, _, source in sent] == [("info", "run2")], sent
    assert sent[0][1].startswith(f"stream restarted as pid {second.pid} (HUNG; hung): stopped in "), sent
    assert f"lease taken {second.startup_s:.1f}s after launch" in sent[0][1]


def test_a_stream_started_since_the_check_is_left_alone_unless_forced(
        settings: Settings, launch: Callable[[str], StartStream], send: SendAlert) -> None:
    with CheckpointLease(settings.lease_path, settings.checkpoint_location):  # someone started it: this process
        left = restart_stream(settings, _verdict(Overall.DEAD), start=_never, stop=_never, send=send)
    assert left == RestartOutcome(False, os.getpid(), None)
    assert left.to_json() == {"started": False, "pid": os.getpid(), "startup_s": None, "stopped": None}
    assert load_history(settings).starts == [] and read_alerts(settings.run_paths.alerts) == []

    running = launch("drain")()
    forced = restart_stream(settings, _verdict(Overall.DEAD), start=launch("drain"), stop=partial(_stop, settings),
                            send=send, force=True, reason="operator")
    assert forced.started and forced.stopped is not None and forced.stopped.pid == running != forced.pid
    assert len(load_history(settings).starts) == 1


def test_a_stream_started_between_stop_and_start_is_not_started_twice(settings: Settings,
                                                                      send: SendAlert) -> None:
    with ExitStack() as racer:
        def stop_then_someone_starts() -> StopOutcome:
            stopped = _stop(settings)
            racer.enter_context(CheckpointLease(settings.lease_path, settings.checkpoint_location))
            return stopped

        outcome = restart_stream(settings, _verdict(Overall.DEAD), start=partial(start_stream_detached, settings),
                                 stop=stop_then_someone_starts, send=send)
    assert outcome == RestartOutcome(False, os.getpid(), StopOutcome(StopMethod.NOT_RUNNING, None, 0.0))
    assert load_history(settings).starts == [] and read_alerts(settings.run_paths.alerts) == []


def test_a_failed_launch_is_recorded_alerted_and_raised(settings: Settings, launch: Callable[[str], StartStream],
                                                        send: SendAlert) -> None:
    with pytest.raises(StreamLaunchFailedError, match="boom: cannot start") as failed:
        restart_stream(settings, _verdict(Overall.DEAD), start=launch("die"), stop=partial(_stop, settings),
                       send=send, source="run1")
    assert len(load_history(settings).starts) == 1, "a failed launch counts towards the backoff and the breaker"
    [alert] = read_alerts(settings.run_paths.alerts)
    assert (alert["severity"], alert["summary"], alert["source"]) == ("critical", "stream launch failed (exit 1)",
                                                                      "run1")
    assert alert["next_action"] == f"read {failed.value.log_path}" and alert["verdict"]["label"] == "DEAD"


def test_an_escalation_is_delivered_once_per_failure(settings: Settings, send: SendAlert) -> None:
    failure = FailureDocument(FailureClass.INTEGRITY, "gap", 82, "t", 0, 5, occurred_at="2026-01-01T00:00:00+00:00")
    verdict = _verdict(Overall.FAILED, failure=failure)
    decision = decide(verdict, load_history(settings), WARDEN, time.time())
    assert decision.action is Action.ESCALATE

    first = alert_decision(settings, verdict, decision, send=send, source="run1")
    again = alert_decision(settings, verdict, decision, send=send, source="run2")
    assert (first.alert.key, first.repeated, first.deliveries) == ("failure@2026-01-01T00:00:00+00:00", False,
                                                                   {"log": "sent"})
    assert (again.repeated, again.deliveries) == (True, {})
    assert again.to_json() == {"alert": again.alert.to_json(), "deliveries": {}}
    assert first.alert.failure is not None and first.alert.failure["offset"] == 5

    later = _verdict(Overall.FAILED, failure=replace(failure, occurred_at="2026-01-02T00:00:00+00:00"))
    assert not alert_decision(settings, later, decision, send=send, source="run3").repeated
    assert [source for _, _, source in _sent(settings)] == ["run1", "run3"]


def test_an_open_breaker_is_alerted_once_per_last_start(settings: Settings, send: SendAlert) -> None:
    now = time.time()
    save_history(settings, RestartHistory([now - 30, now - 20, now - 10]))
    verdict = _verdict(Overall.DEAD)
    decision = decide(verdict, load_history(settings), WARDEN, now)
    assert decision.breaker_open

    first = alert_decision(settings, verdict, decision, send=send)
    assert first.alert.key == f"breaker@{now - 10}" and not first.repeated
    assert alert_decision(settings, verdict, decision, send=send).repeated

    save_history(settings, load_history(settings).with_start(now))  # a forced restart, and it died again
    after = alert_decision(settings, verdict, decide(verdict, load_history(settings), WARDEN, now + 1), send=send)
    assert after.alert.key == f"breaker@{now}" and not after.repeated
    assert len(read_alerts(settings.run_paths.alerts)) == 2


def test_a_degraded_stream_is_alerted_every_time(settings: Settings, send: SendAlert) -> None:
    verdict = _verdict(Overall.DEGRADED, pid=os.getpid())
    decision = decide(verdict, load_history(settings), WARDEN, time.time())
    assert decision.action is Action.ALERT
    outcomes = [alert_decision(settings, verdict, decision, send=send) for _ in range(2)]
    assert [(o.alert.key, o.deliveries) for o in outcomes] == [(None, {"log": "sent"})] * 2
    assert [severity for severity, _, _ in _sent(settings)] == ["warning", "warning"]
