"""The warden keeps one warm standby beside a running stream (``STREAMWARDEN_WARDEN_STANDBY``).

The standby (:mod:`streamwarden.stream.standby`) takes over by itself when the stream's holder dies; the
warden only launches a new one after each check that finds the stream running without one, and after each
restart. None is launched while a recovery or an upgrade holds the stream, nor when nothing runs to stand by
for (the warden's restart comes first).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from streamwarden.runfiles.hold import read_hold
from streamwarden.settings import Settings
from streamwarden.warden.launcher import (
    StreamAlreadyRunningError,
    read_launch_record,
    running_holder,
    running_standby,
)

log = logging.getLogger(__name__)

StartStandby = Callable[[], int]
"""Launches a standby; its pid once it holds the standby lease (as ``start_stream_detached(standby=True)``)."""


class StandbyState(StrEnum):
    OFF = "off"  # the setting is off
    NOT_NEEDED = "not_needed"  # no stream runs, or it is held: nothing to stand by for now
    WAITING = "waiting"  # one waits already
    STARTED = "started"  # launched by this call


@dataclass(frozen=True)
class StandbyOutcome:
    """What :func:`keep_standby` found or did; ``took_over``: the running stream is the last standby, which took
    the lease from a stream that died (at ``took_over``, the time it took the lease)."""

    state: StandbyState
    pid: int | None = None
    reason: str = ""
    took_over: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "state": self.state.value}


def keep_standby(settings: Settings, enabled: bool, start: StartStandby) -> StandbyOutcome:
    """Launch a standby when the setting is on, the stream runs and none waits; what was found or done."""
    if not enabled:
        return StandbyOutcome(StandbyState.OFF, reason="STREAMWARDEN_WARDEN_STANDBY is off")
    hold = read_hold(settings)
    if hold is not None:
        return StandbyOutcome(StandbyState.NOT_NEEDED, reason=f"the stream is {hold.describe()}")
    stream = running_holder(settings)
    if stream is None:
        return StandbyOutcome(StandbyState.NOT_NEEDED, reason="the stream is not running")
    waiting = running_standby(settings)
    if waiting is not None:
        return StandbyOutcome(StandbyState.WAITING, waiting.pid, f"beside the stream (pid {stream.pid})")
    last = read_launch_record(settings, standby=True)
    took_over = (stream.started_at if last is not None and stream.pgid == last.pid
                 and stream.host == (last.host or stream.host) else None)
    try:
        pid = start()
    except StreamAlreadyRunningError as exc:  # another launch won the race
        return StandbyOutcome(StandbyState.WAITING, exc.holder.pid if exc.holder else None, str(exc), took_over)
    log.info("standby launched: pid %d waits for the lease of the stream (pid %d)", pid, stream.pid)
    return StandbyOutcome(StandbyState.STARTED, pid, f"beside the stream (pid {stream.pid})", took_over)
