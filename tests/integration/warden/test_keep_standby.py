"""The warden's warm standby with real processes holding the real leases (the stand-in stream, and the job's own
wait for the lease as a standby): kept one at a time, taking over a killed stream, stopped first by a stop."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from streamwarden.processes import live
from streamwarden.runfiles.hold import release_hold, take_hold
from streamwarden.settings import Settings, load_settings
from streamwarden.warden.launcher import (
    CommandBuilder,
    StreamAlreadyRunningError,
    running_holder,
    running_standby,
    start_stream_detached,
)
from streamwarden.warden.standby import StandbyState, keep_standby
from streamwarden.warden.stop import StopMethod, stop_stream


@pytest.fixture()
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("STREAMWARDEN_HOME", str(tmp_path / "home"))  # the stand-in standby loads its settings
    return load_settings()


def _until(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_one_standby_takes_over_a_killed_stream_and_a_stop_stops_it_first(
        settings: Settings, stand_in: Callable[[str], CommandBuilder]) -> None:
    def start_standby() -> int:
        return start_stream_detached(settings, build_command=stand_in("drain"), lease_timeout=30, standby=True)

    assert keep_standby(settings, True, start_standby).state is StandbyState.NOT_NEEDED  # nothing to stand by for
    stream = start_stream_detached(settings, build_command=stand_in("drain"), lease_timeout=30)
    assert keep_standby(settings, False, start_standby).state is StandbyState.OFF

    started = keep_standby(settings, True, start_standby)
    assert started.state is StandbyState.STARTED and started.pid is not None and started.pid != stream
    standby = running_standby(settings)
    assert standby is not None and standby.pid == started.pid
    assert keep_standby(settings, True, start_standby).state is StandbyState.WAITING
    with pytest.raises(StreamAlreadyRunningError):
        start_standby()  # one at a time: its own lease

    # kill -9 of the stream: the standby holds the lease within moments, no warden involved
    os.killpg(os.getpgid(stream), signal.SIGKILL)
    assert _until(lambda: (h := running_holder(settings)) is not None and h.pid == started.pid), \
        "the standby did not take over"
    assert _until(lambda: running_standby(settings) is None), "the standby kept its lease after taking over"
    taken = running_holder(settings)
    replacement = keep_standby(settings, True, start_standby)
    assert replacement.state is StandbyState.STARTED
    assert taken is not None and replacement.took_over == taken.started_at  # the takeover, told once
    assert keep_standby(settings, True, start_standby).took_over is None

    # no standby while a recovery or an upgrade holds the stream
    take_hold(settings, "recover_stream/run-1", "a recovery")
    assert keep_standby(settings, True, start_standby).state is StandbyState.NOT_NEEDED
    release_hold(settings, "recover_stream/run-1")

    # a stop on purpose: the standby first, then the stream drains; nothing takes over
    outcome = stop_stream(settings, drain_timeout=10, term_timeout=5)
    assert outcome.method is StopMethod.DRAINED and outcome.pid == started.pid
    assert not live([replacement.pid or 0]) and running_holder(settings) is None and running_standby(settings) is None
