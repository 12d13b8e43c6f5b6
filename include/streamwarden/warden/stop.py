"""Stopping the stream, gracefully first.

Graceful stop: the stop marker (``<run_root>/stop``) makes the job drain its current batch and exit 0;
the job deletes the marker on exit. Only when the drain does not finish in time is the holder's process
group signalled: SIGTERM, then SIGKILL. A stopped (SIGSTOPped) process can neither drain nor act on
SIGTERM, so a group with a stopped member is killed at once.

A warm standby is stopped first, whichever way the stream is stopped: it would otherwise take the lease the
moment the stream lets it go, and a stop on purpose would become a takeover.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import psutil

from streamwarden.atomic import write_bytes_atomic
from streamwarden.processes import group_members, live
from streamwarden.settings import Settings
from streamwarden.warden.launcher import read_launch_record, running_holder, running_standby

LIFECYCLE_POOL = "stream_lifecycle"
"""Airflow pool (1 slot) every task that starts or stops the stream runs in."""
EXIT_STOP_TIMEOUT = 124
"""``streamwarden stop --wait S`` exit code when the stream still runs after S seconds."""


class StopMethod(StrEnum):
    """How the stream ended."""

    NOT_RUNNING = "not_running"  # nothing to stop
    DRAINED = "drained"  # the job drained after the stop marker and exited by itself
    TERMINATED = "terminated"  # SIGTERM to its process group
    KILLED = "killed"  # SIGKILL to its process group


@dataclass(frozen=True)
class StopOutcome:
    """What :func:`stop_stream` did."""

    method: StopMethod
    pid: int | None
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {"method": self.method.value, "pid": self.pid, "seconds": round(self.seconds, 3)}


class StopFailedError(RuntimeError):
    """The stream could not be stopped (still alive after SIGKILL, or held from another host)."""


def request_stop(settings: Settings, wait: float | None) -> int:
    """``streamwarden stop``: stop the standby, write the stop marker; with ``wait``, wait until the lease is
    free."""
    stop_standby(settings)
    holder = running_holder(settings)
    if holder is None:
        print("the stream is not running; nothing to stop")
        return 0
    write_bytes_atomic(settings.run_paths.stop_marker, b"")
    print(f"stop requested: pid {holder.pid} on {holder.host} drains and exits")
    if wait is None:
        return 0
    if _wait_until(lambda: running_holder(settings) is None, wait):
        print("the stream has stopped")
        return 0
    print(f"the stream is still running after {wait:g}s (pid {holder.pid}); it keeps draining",
          file=sys.stderr)
    return EXIT_STOP_TIMEOUT


def stop_stream(settings: Settings, drain_timeout: float = 120.0, term_timeout: float = 30.0) -> StopOutcome:
    """Stop the stream: marker and drain, then SIGTERM to its process group, then SIGKILL.

    Also stops a launched stream that has not taken the lease yet (from the launch record). Never
    signals the caller's own process group: a holder inside it gets the signals to its pid only.
    """
    started = time.monotonic()
    stop_standby(settings, term_timeout)
    holder = running_holder(settings)
    if holder is not None and holder.host != socket.gethostname():
        write_bytes_atomic(settings.run_paths.stop_marker, b"")
        if _wait_until(lambda: running_holder(settings) is None, drain_timeout):
            return StopOutcome(StopMethod.DRAINED, holder.pid, time.monotonic() - started)
        raise StopFailedError(f"the stream on {holder.host} (pid {holder.pid}) did not drain within "
                              f"{drain_timeout:g}s; it cannot be signalled from {socket.gethostname()}")
    if holder is not None:
        pid, group = holder.pid, holder.pgid
    else:
        record = read_launch_record(settings)
        if record is None or not record.leader_alive():
            return StopOutcome(StopMethod.NOT_RUNNING, None, 0.0)
        pid, group = record.pid, record.pid
    target = _Target(pid, group)

    if holder is not None and not target.stopped():
        write_bytes_atomic(settings.run_paths.stop_marker, b"")

        def drained() -> bool:
            return running_holder(settings) is None and not target.alive()

        if _wait_until(lambda: drained() or target.stopped(), drain_timeout) and drained():
            return StopOutcome(StopMethod.DRAINED, pid, time.monotonic() - started)
    for sig, method in ((signal.SIGTERM, StopMethod.TERMINATED), (signal.SIGKILL, StopMethod.KILLED)):
        if sig == signal.SIGTERM and target.stopped():
            continue  # SIGTERM would stay pending on a stopped process
        target.signal(sig)
        if _wait_until(lambda: not target.alive(), term_timeout):
            settings.run_paths.stop_marker.unlink(missing_ok=True)  # the job had no chance to remove it
            return StopOutcome(method, pid, time.monotonic() - started)
    raise StopFailedError(f"the stream (pid {pid}, process group {group}) survived SIGKILL")


def stop_standby(settings: Settings, term_timeout: float = 30.0) -> int | None:
    """Stop the warm standby on this host (it holds no batch: SIGTERM, then SIGKILL), waiting or starting; its
    pid, or ``None`` when there was none. A standby on another host is left to that host's stop."""
    holder = running_standby(settings)
    if holder is not None and holder.host == socket.gethostname():
        pid, group = holder.pid, holder.pgid
    else:
        record = read_launch_record(settings, standby=True)
        stream = running_holder(settings)
        if record is None or not record.leader_alive() or (stream is not None and stream.pgid == record.pid):
            return None  # none starting; or the last one took over: it is the stream now
        pid, group = record.pid, record.pid
    target = _Target(pid, group)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        target.signal(sig)
        if _wait_until(lambda: not target.alive(), term_timeout):
            return pid
    raise StopFailedError(f"the standby (pid {pid}, process group {group}) survived SIGKILL")


@dataclass(frozen=True)
class _Target:
    """The stream's processes: its whole process group, or only its pid when that group is ours."""

    pid: int
    pgid: int

    @property
    def whole_group(self) -> bool:
        return self.pgid != os.getpgrp()

    def members(self) -> list[psutil.Process]:
        return group_members(self.pgid) if self.whole_group else live([self.pid])

    def alive(self) -> bool:
        return bool(self.members())

    def stopped(self) -> bool:
        """True when a member is stopped (SIGSTOP): it cannot drain, and SIGTERM would stay pending."""
        for process in self.members():
            try:
                if process.status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP):
                    return True
            except psutil.NoSuchProcess:
                continue
        return False

    def signal(self, sig: signal.Signals) -> None:
        """Signal the group, and each member outside it (PySpark's worker daemon leaves the group)."""
        members = self.members()
        try:
            if self.whole_group:
                os.killpg(self.pgid, sig)
            else:
                os.kill(self.pid, sig)
        except ProcessLookupError:
            pass
        for process in members if self.whole_group else []:
            try:
                if os.getpgid(process.pid) != self.pgid:
                    process.send_signal(sig)
            except (ProcessLookupError, psutil.NoSuchProcess):
                continue


def _wait_until(condition: Callable[[], bool], timeout: float, interval: float = 0.25) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
    return True
