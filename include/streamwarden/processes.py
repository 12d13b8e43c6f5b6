"""Finding live processes by pid or by process group (the stream runs in a group of its own)."""

from __future__ import annotations

import contextlib
import os

import psutil


def live(pids: list[int]) -> list[psutil.Process]:
    """The processes among ``pids`` that exist and are not zombies."""
    processes = []
    for pid in pids:
        try:
            process = psutil.Process(pid)
            if process.status() != psutil.STATUS_ZOMBIE:
                processes.append(process)
        except psutil.NoSuchProcess:
            continue
    return processes


def group_members(pgid: int) -> list[psutil.Process]:
    """Live members of process group ``pgid``, and the live descendants of its leader.

    The descendants matter: PySpark's worker daemon moves itself into a process group of its own
    (``os.setpgid(0, 0)``), so ``killpg`` on the stream's group does not reach it.
    """
    found = set()
    for pid in psutil.pids():
        try:
            if os.getpgid(pid) == pgid:
                found.add(pid)
        except ProcessLookupError:
            continue
    with contextlib.suppress(psutil.NoSuchProcess):
        found.update(child.pid for child in psutil.Process(pgid).children(recursive=True))
    return live(sorted(found))
