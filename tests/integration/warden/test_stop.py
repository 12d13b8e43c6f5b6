"""Launching detached and stopping (drain, SIGTERM, SIGKILL) with real processes that hold the real lease.

The stand-in stream is a small Python program launched through the launcher's command hook: it takes
the checkpoint lease like the job does and then drains on the stop marker, ignores it, or ignores SIGTERM.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from fixtures.stand_in import launching
from streamwarden.processes import live
from streamwarden.runfiles.lease import is_held
from streamwarden.settings import Settings, load_settings
from streamwarden.warden.launcher import (
    CommandBuilder,
    StreamAlreadyRunningError,
    StreamLaunchFailedError,
    read_launch_record,
    start_stream_detached,
)
from streamwarden.warden.status import read_status
from streamwarden.warden.stop import (
    EXIT_STOP_TIMEOUT,
    StopMethod,
    request_stop,
    stop_stream,
)


@pytest.fixture()
def settings(tmp_path: Path) -> Settings:
    return load_settings(home=tmp_path / "home")


def test_start_detached_then_drain(settings: Settings, stand_in: Callable[[str], CommandBuilder],
                                   capsys: pytest.CaptureFixture[str]) -> None:
    settings.run_paths.stop_marker.parent.mkdir(parents=True)
    settings.run_paths.stop_marker.touch()  # stale marker from an earlier stop: must not stop the new stream
    pid = start_stream_detached(settings, build_command=stand_in("drain"), lease_timeout=30)

    assert read_status(settings).pid == pid
    assert os.getsid(pid) != os.getsid(0), "the stream must run in a session of its own"
    record = read_launch_record(settings)
    assert record is not None and record.pid == pid and record.leader_alive()
    assert "stand-in starting drain" in Path(record.log_path).read_text()
    assert not settings.run_paths.stop_marker.exists()

    assert request_stop(settings, wait=20) == 0
    assert "stopped" in capsys.readouterr().out
    assert not live([pid]) and not is_held(settings.lease_path) and not settings.run_paths.stop_marker.exists()


def test_second_start_is_refused(settings: Settings, stand_in: Callable[[str], CommandBuilder]) -> None:
    pid = start_stream_detached(settings, build_command=stand_in("drain"), lease_timeout=30)
    with pytest.raises(StreamAlreadyRunningError, match=f"pid {pid}"):
        start_stream_detached(settings, build_command=stand_in("drain"), lease_timeout=30)
    outcome = stop_stream(settings, drain_timeout=20, term_timeout=5)
    assert (outcome.method, outcome.pid) == (StopMethod.DRAINED, pid)


@pytest.mark.parametrize(("mode", "method"), [("ignore-marker", StopMethod.TERMINATED),
                                              ("ignore-term", StopMethod.KILLED)])
def test_stop_escalates(settings: Settings, stand_in: Callable[[str], CommandBuilder], mode: str,
                        method: StopMethod) -> None:
    pid = start_stream_detached(settings, build_command=stand_in(mode), lease_timeout=30)
    outcome = stop_stream(settings, drain_timeout=1, term_timeout=3)
    assert (outcome.method, outcome.pid) == (method, pid)
    assert not live([pid]) and not is_held(settings.lease_path)
    assert not settings.run_paths.stop_marker.exists(), "a marker the job never saw must not stop the next start"


def test_a_stopped_stream_is_killed_without_waiting_for_a_drain(settings: Settings,
                                                               stand_in: Callable[[str], CommandBuilder]) -> None:
    """SIGTERM stays pending on a SIGSTOPped process and it cannot drain: it is SIGKILLed at once."""
    pid = start_stream_detached(settings, build_command=stand_in("drain"), lease_timeout=30)
    os.kill(pid, signal.SIGSTOP)
    while psutil.Process(pid).status() != psutil.STATUS_STOPPED:
        time.sleep(0.05)
    outcome = stop_stream(settings, drain_timeout=60, term_timeout=5)
    assert (outcome.method, outcome.pid) == (StopMethod.KILLED, pid)
    assert outcome.seconds < 10, "no drain wait for a stopped process"
    assert not live([pid]) and not is_held(settings.lease_path)


def test_stop_wait_times_out(settings: Settings, stand_in: Callable[[str], CommandBuilder],
                             capsys: pytest.CaptureFixture[str]) -> None:
    start_stream_detached(settings, build_command=stand_in("ignore-marker"), lease_timeout=30)
    assert request_stop(settings, wait=1) == EXIT_STOP_TIMEOUT
    assert "still running" in capsys.readouterr().err


def test_nothing_to_stop(settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    assert stop_stream(settings).method is StopMethod.NOT_RUNNING
    assert request_stop(settings, wait=1) == 0
    assert "not running" in capsys.readouterr().out
    assert not settings.run_paths.stop_marker.exists(), "a marker left behind would stop the next start at once"


def test_launch_failure_carries_the_log_tail(settings: Settings,
                                             stand_in: Callable[[str], CommandBuilder]) -> None:
    with pytest.raises(StreamLaunchFailedError, match="boom: cannot start") as caught:
        start_stream_detached(settings, build_command=stand_in("die"), lease_timeout=30)
    assert caught.value.exit_code == 1


def test_lease_timeout_kills_the_launch(settings: Settings, stand_in: Callable[[str], CommandBuilder]) -> None:
    with pytest.raises(StreamLaunchFailedError, match="did not take the lease"):
        start_stream_detached(settings, build_command=stand_in("no-lease"), lease_timeout=2)
    record = read_launch_record(settings)
    assert record is not None and not record.leader_alive()


def test_stop_reaches_a_stream_that_has_no_lease_yet(settings: Settings,
                                                     stand_in: Callable[[str], CommandBuilder]) -> None:
    """``up`` stopping while an Airflow task is still launching: the launch record finds the process."""
    launcher, errors = launching(settings, stand_in("no-lease"), lease_timeout=60)
    outcome = stop_stream(settings, drain_timeout=5, term_timeout=5)
    launcher.join(10)
    assert outcome.method is StopMethod.TERMINATED
    assert len(errors) == 1 and isinstance(errors[0], StreamLaunchFailedError)
