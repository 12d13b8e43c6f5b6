"""Finding live processes by pid or by process group (the stream runs in a group of its own)."""

from __future__ import annotations

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
    """Live members of process group ``pgid``."""
    found = []
    for pid in psutil.pids():
        try:
            if os.getpgid(pid) == pgid:
                found.append(pid)
        except ProcessLookupError:
            continue
    return live(found)
