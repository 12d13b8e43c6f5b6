"""What a crashed ``streamwarden up`` left running, found by a mark in its environment, and stopped.

``up`` starts its components in sessions of their own (so a terminal's Ctrl-C reaches only ``up``, which
stops them in order), and Airflow launches the stream detached. When ``up`` itself is killed (kill -9, an
out-of-memory kill) nothing stops them: broker, producer, Airflow and the stream keep running, on the
same home. Every process ``up`` starts therefore carries :data:`MARK` (the home's absolute path) in its
environment, which every descendant inherits: Airflow's components and tasks, and the stream (its
launcher keeps every variable but Airflow's and Streamwarden's own). The next ``up`` on that home, once it
holds the home's lock (so no other ``up`` runs there), kills every process still carrying the mark before
it starts anything, and their descendants with them: a process that renames itself (Airflow's executor
workers and log servers, through ``setproctitle``) overwrites the memory ``/proc/<pid>/environ`` shows, mark
included. The name has no ``STREAMWARDEN_`` prefix: the settings refuse variables of theirs that name no
setting.
"""

from __future__ import annotations

import time
from pathlib import Path

import psutil

from streamwarden.failures import EnvironmentFailure

MARK = "SW_UP_HOME"
ROUNDS = 5
"""Sweeps at most: a process may start one more (a scheduler its task) between a sweep and the kill."""


def marked(env: dict[str, str], home: Path) -> dict[str, str]:
    """``env`` with the mark of the ``up`` running on ``home``."""
    return {**env, MARK: str(home.absolute())}


def find_leftovers(home: Path) -> list[psutil.Process]:
    """Live processes marked with ``home`` and their descendants, except this process and its ancestors (a
    shell that exported the mark by hand must not be killed with them)."""
    value = str(home.absolute())
    own = {psutil.Process().pid, *(p.pid for p in psutil.Process().parents())}
    found: dict[int, psutil.Process] = {}
    for process in psutil.process_iter():
        if process.pid in own or process.pid in found:
            continue
        try:
            if process.status() != psutil.STATUS_ZOMBIE and process.environ().get(MARK) == value:
                found[process.pid] = process
                found.update((child.pid, child) for child in process.children(recursive=True)
                             if child.pid not in own and child.status() != psutil.STATUS_ZOMBIE)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return list(found.values())


def kill_leftovers(home: Path, timeout: float = 10.0) -> list[str]:
    """SIGKILL every process :func:`find_leftovers` finds, until none is left; ``pid command`` of each.

    SIGKILL, not a graceful stop: the state of that run is archived next, the stream commits exactly once
    whenever it dies, and a graceful stop would give Airflow time to start the stream again.
    """
    killed: list[str] = []
    for _ in range(ROUNDS):
        processes = find_leftovers(home)
        if not processes:
            return killed
        for process in processes:
            try:
                killed.append(f"{process.pid} {' '.join(process.cmdline()[:3])}")
                process.kill()
            except psutil.NoSuchProcess:
                continue
        _wait_gone(processes, timeout)
    left = [f"{p.pid} {' '.join(p.cmdline()[:3])}" for p in find_leftovers(home)]
    if left:
        raise EnvironmentFailure(f"processes of an earlier `streamwarden up` on {home} survive SIGKILL: {left}")
    return killed


def _wait_gone(processes: list[psutil.Process], timeout: float) -> None:
    """Until each is gone or a zombie (not ours to reap: its parent, or init, does)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = []
        for process in processes:
            try:
                if process.status() != psutil.STATUS_ZOMBIE:
                    alive.append(process)
            except psutil.NoSuchProcess:
                continue
        if not alive:
            return
        processes = alive
        time.sleep(0.1)
