"""The hold of a recovery or an upgrade: taken and released by its owner only; while it exists the warden
decides nothing, the stream is not started and maintenance changes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamwarden.maintenance.request import request_from_params
from streamwarden.maintenance.settings import MaintenanceSettings
from streamwarden.maintenance.steps import clean_up, compact
from streamwarden.runfiles.hold import StreamHeldError, read_hold, release_hold, take_hold
from streamwarden.settings import Settings
from streamwarden.warden.decision import Action, decide
from streamwarden.warden.health import HealthVerdict, Overall
from streamwarden.warden.launcher import start_stream_detached
from streamwarden.warden.restart_policy import RestartHistory
from streamwarden.warden.settings import WardenSettings


@pytest.fixture()
def settings(tmp_path: Path) -> Settings:
    return Settings(home=tmp_path / "home")


def test_only_the_owner_takes_it_again_or_releases_it(settings: Settings) -> None:
    first = take_hold(settings, "recover_stream/run-1", "recovery abc")
    assert take_hold(settings, "recover_stream/run-1", "again") == first, "re-entered by its owner, unchanged"
    with pytest.raises(StreamHeldError, match=r"recover_stream/run-1 .*recovery abc"):
        take_hold(settings, "upgrade_stream/run-2", "upgrade")
    with pytest.raises(StreamHeldError, match="not by upgrade_stream/run-2"):
        release_hold(settings, "upgrade_stream/run-2")
    assert read_hold(settings) == first
    assert release_hold(settings, "recover_stream/run-1") == first
    assert read_hold(settings) is None and release_hold(settings, None) is None


def test_while_held_nothing_starts_restarts_or_maintains(settings: Settings) -> None:
    take_hold(settings, "recover_stream/run-1", "recovery abc")
    dead = HealthVerdict(Overall.DEAD, ["no stream process"], "2026-11-24T00:00:00+00:00")
    decision = decide(dead, RestartHistory([]), WardenSettings(), 0.0, force_restart=True,
                      hold=read_hold(settings))
    assert decision.action is Action.NONE and "recover_stream/run-1" in decision.reason
    with pytest.raises(StreamHeldError, match="starting the stream refused"):
        start_stream_detached(settings, build_command=lambda s, a: ["false"])
    request = request_from_params({}, settings, MaintenanceSettings())
    with pytest.raises(StreamHeldError, match="compaction refused"):
        compact(settings, request, [], "run")
    with pytest.raises(StreamHeldError, match="vacuum and log clean-up refused"):
        clean_up(settings, MaintenanceSettings(), request)
    release_hold(settings, None)
    assert decide(dead, RestartHistory([]), WardenSettings(), 0.0, hold=read_hold(settings)).action is Action.RESTART
