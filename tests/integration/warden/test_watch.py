"""The continuous watch on real processes and files: a stand-in stream that holds the real lease (launched
through the real launcher), its heartbeat, kill -9, SIGSTOP, an exit document and a hold."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from fixtures.stand_in import launching
from streamwarden.failures import FailureClass, FailureDocument
from streamwarden.runfiles.failure_file import write_failure
from streamwarden.runfiles.heartbeat import Heartbeat, write_heartbeat
from streamwarden.runfiles.hold import release_hold, take_hold
from streamwarden.settings import Settings, load_settings
from streamwarden.warden.launcher import (
    CommandBuilder,
    read_launch_record,
    running_holder,
    start_stream_detached,
    starting_launch,
)
from streamwarden.warden.settings import load_warden_settings
from streamwarden.warden.watch import Sighting, Sign, StreamWatch

WARDEN = load_warden_settings(heartbeat_floor=30, startup_grace=20)


@pytest.fixture()
def settings(tmp_path: Path) -> Settings:
    return load_settings(home=tmp_path / "home", trigger_interval="1s")


def _beat(settings: Settings, pid: int, batch_id: int | None, age: float = 0.0) -> None:
    written = datetime.fromtimestamp(time.time() - age, UTC).isoformat()
    write_heartbeat(settings.run_paths.heartbeat, Heartbeat("progress", "q", "r", pid, batch_id=batch_id,
                                                       written_at=written, trigger_interval_s=1.0))


def _gone(settings: Settings) -> None:
    deadline = time.monotonic() + 30
    while running_holder(settings) is not None:
        assert time.monotonic() < deadline, "the lease was not released"
        time.sleep(0.05)


def _round_trip(sighting: Sighting | None) -> Sighting:
    assert sighting is not None
    assert Sighting.from_json(sighting.to_json()) == sighting
    return sighting


def test_a_kill_9_is_seen_at_the_next_look_and_reported_once(
        settings: Settings, stand_in: Callable[[str], CommandBuilder]) -> None:
    watch = StreamWatch(settings, WARDEN)
    pid = start_stream_detached(settings, build_command=stand_in("drain"), lease_timeout=30)
    _beat(settings, pid, 7)
    assert watch.look() is None, "running, fresh heartbeat"

    os.killpg(os.getpgid(pid), signal.SIGKILL)
    killed = time.monotonic()
    _gone(settings)
    sighting = _round_trip(watch.look())
    assert time.monotonic() - killed < 30
    assert (sighting.sign, sighting.pid) == (Sign.DEAD, pid)
    assert "no live process holds the checkpoint lease" in sighting.text()
    assert watch.look() is None, "one report per death"


def test_a_stopped_driver_is_hung_once_its_heartbeat_passes_the_limit_then_not_reported_again(
        settings: Settings, stand_in: Callable[[str], CommandBuilder]) -> None:
    watch = StreamWatch(settings, WARDEN)
    pid = start_stream_detached(settings, build_command=stand_in("drain"), lease_timeout=30)
    try:
        _beat(settings, pid, None, age=15)
        assert watch.look() is None, "first batch pending: the start-up grace (20 s) applies"
        _beat(settings, pid, 3, age=29)
        assert watch.look() is None, "within the floor (30 s)"
        os.kill(pid, signal.SIGSTOP)
        _beat(settings, pid, 3, age=31)
        sighting = _round_trip(watch.look())
        assert (sighting.sign, sighting.pid) == (Sign.HUNG, pid)
        assert "is 31s old, limit 30s (floor)" in sighting.evidence
        assert watch.look() is None
    finally:
        os.killpg(os.getpgid(pid), signal.SIGKILL)
    _gone(settings)
    assert watch.look() is None, "the hung process, now killed, is not reported again as dead"


def test_an_exit_document_is_reported_with_its_class_and_a_hold_keeps_the_watch_quiet(
        settings: Settings, stand_in: Callable[[str], CommandBuilder]) -> None:
    watch = StreamWatch(settings, WARDEN)
    pid = start_stream_detached(settings, build_command=stand_in("drain"), lease_timeout=30)
    assert watch.look() is None, "running, no heartbeat yet: within the start-up grace"
    take_hold(settings, "recover_stream/run1", "drill")
    os.killpg(os.getpgid(pid), signal.SIGKILL)
    _gone(settings)
    assert watch.look() is None, "held by a recovery: stopped on purpose"
    release_hold(settings, "recover_stream/run1")

    write_failure(settings.run_paths.failure, FailureDocument(FailureClass.INTEGRITY, "gap at t[0]", 82, "t", 0, 5))
    sighting = _round_trip(watch.look())
    assert (sighting.sign, sighting.pid) == (Sign.FAILED, pid)
    assert sighting.evidence == "exited with INTEGRITY (exit 82): gap at t[0]"
    assert watch.look() is None


def test_nothing_is_reported_while_a_launched_stream_takes_its_lease(
        settings: Settings, stand_in: Callable[[str], CommandBuilder]) -> None:
    watch = StreamWatch(settings, WARDEN)
    launched = time.monotonic()
    launcher, failed = launching(settings, stand_in("no-lease"), lease_timeout=3)
    looks = []
    while launcher.is_alive():
        looks.append((time.monotonic() - launched, watch.look()))
        time.sleep(0.2)
    # the looks of the three seconds the lease may take; the later ones may see the process the launcher has just
    # killed, before its thread ends, and then the death is reported there: once, by a later look or the next one
    starting = [look for at, look in looks if at < 2.5]
    assert len(starting) >= 5 and set(starting) == {None}, "launched, no lease yet: starting"
    assert failed and "did not take the lease" in str(failed[0])
    reported = [look for at, look in looks if at >= 2.5 and look is not None] + [
        look for look in [watch.look()] if look is not None]  # the launcher killed it: nothing runs
    assert len(reported) == 1, reported
    sighting = _round_trip(reported[0])
    assert (sighting.sign, sighting.pid, sighting.key) == (Sign.DEAD, None, "dead:unknown")


def test_a_killed_driver_is_dead_while_its_launcher_lingers(
        settings: Settings, stand_in: Callable[[str], CommandBuilder]) -> None:
    """spark-submit outlives its killed driver for a moment: a group that held the lease is not "starting"."""
    watch = StreamWatch(settings, WARDEN)
    driver = start_stream_detached(settings, build_command=stand_in("driver-child"), lease_timeout=30)
    launch = read_launch_record(settings)
    assert launch is not None and launch.pid != driver
    assert starting_launch(settings, time.time(), WARDEN.startup_grace) is None, "its driver holds the lease"
    os.kill(driver, signal.SIGKILL)
    _gone(settings)
    assert launch.leader_alive()
    assert starting_launch(settings, time.time(), WARDEN.startup_grace) is None
    sighting = _round_trip(watch.look())
    assert (sighting.sign, sighting.pid) == (Sign.DEAD, driver)
