"""Takeovers measured: kill -9 of the stream, then the next batch committed by a warm standby or a new process.

The standby drill (``tests/drills/stream/test_standby_takeover.py``: a few kills, every offset exactly once at rest) and
``make bench-standby`` (ten kills or more, the figures to ``bench/results/standby/``) drive the real job the same
way: ``streamwarden stream [--standby]`` processes in groups of their own on one checkpoint.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from streamwarden.processes import group_members
from streamwarden.runfiles.checkpoint import commit_batches
from streamwarden.runfiles.lease import LeaseHolder, is_held, read_holder
from streamwarden.settings import Settings


@dataclass(frozen=True)
class Takeover:
    """One kill -9 of the stream and what followed: when the lease was taken again and the next batch committed
    (seconds from the kill), by which process, and the batch the killed one had committed last."""

    standby: bool
    killed_pid: int
    next_pid: int
    last_batch_before: int | None
    lease_s: float
    commit_s: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class StreamProcesses:
    """``streamwarden stream`` processes with one environment, each its own group, logging to one file."""

    env: dict[str, str]
    log_path: Path
    started: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self, standby: bool = False) -> subprocess.Popen[bytes]:
        with open(self.log_path, "ab") as log:
            log.write(f"\n==== start{' --standby' if standby else ''} ====\n".encode())
            process = subprocess.Popen([sys.executable, "-m", "streamwarden", "stream",
                                        *(["--standby"] if standby else [])], env=self.env, stdout=log,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        self.started.append(process)
        return process

    def kill9(self, pgid: int) -> None:
        """SIGKILL the group (the driver's Python, its JVM, its Python workers) and wait until none is left."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        wait_for(lambda: not group_members(pgid), 30, f"process group {pgid} to die")
        for process in self.started:
            if process.pid == pgid:
                process.wait(5)

    def kill_all(self) -> None:
        for process in self.started:
            if process.poll() is None:
                self.kill9(process.pid)


def wait_for(check: Callable[[], bool], timeout: float, what: str, interval: float = 0.02) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout:.0f}s for {what}")
        time.sleep(interval)


def held_by(path: Path) -> LeaseHolder | None:
    """Who holds the lease at ``path`` right now (``None``: nobody)."""
    holder = read_holder(path)
    return holder if holder is not None and is_held(path) else None


def _last_commit(settings: Settings) -> int | None:
    batches = commit_batches(settings.checkpoint_location)
    return batches[-1] if batches else None


def kill_and_heal(settings: Settings, processes: StreamProcesses, rng: random.Random, *, standby: bool,
                  max_pause: float = 3.0, timeout: float = 300.0,
                  on_standby_ready: Callable[[int], None] | None = None) -> Takeover:
    """Kill -9 the running stream at a random moment of its batches (``max_pause`` after a standby is ready, or
    after a batch committed), then wait for the next batch committed by whoever holds the lease next: the waiting
    standby, or a process started right after the kill (what the warden's restart does, without its detection).
    ``on_standby_ready`` is given the waiting standby's pid just before the kill (to measure it)."""
    waiting = None
    if standby:
        waiting = processes.start(standby=True)
        wait_for(lambda: (h := held_by(settings.standby_lease_path)) is not None and h.pgid == waiting.pid, timeout,
                 "the standby to wait for the lease", interval=0.2)
    active = held_by(settings.lease_path)
    if active is None:
        raise RuntimeError("no stream holds the lease: nothing to kill")
    time.sleep(rng.uniform(0.0, max_pause))
    if waiting is not None and on_standby_ready is not None:
        on_standby_ready(waiting.pid)
    killed_at = time.monotonic()
    processes.kill9(active.pgid)
    before = _last_commit(settings)  # read once the killed group is gone: nothing of it commits after this
    successor = waiting or processes.start()
    wait_for(lambda: (h := held_by(settings.lease_path)) is not None and h.pgid == successor.pid, timeout,
             "the lease to be taken again")
    lease_s = time.monotonic() - killed_at
    wait_for(lambda: (b := _last_commit(settings)) is not None and (before is None or b > before), timeout,
             "the next batch committed", interval=0.05)
    commit_s = time.monotonic() - killed_at
    holder = held_by(settings.lease_path)
    return Takeover(standby, active.pid, holder.pid if holder else -1, before, round(lease_s, 3), round(commit_s, 3))
