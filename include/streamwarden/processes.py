"""Live processes by pid or by process group (the stream runs in a group of its own), children that die with their
parent, and orphans adopted as child subreaper."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Callable

import psutil

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


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


def die_with_parent(death_signal: signal.Signals) -> Callable[[], None] | None:
    """What a child runs before exec (``preexec_fn``, safe only in a parent with no other thread) so that the
    kernel sends it ``death_signal`` when its parent dies (Linux only; elsewhere the next ``streamwarden up``
    kills what is left, :mod:`streamwarden.local.leftovers`). A parent gone before that was set is caught by
    its pid."""
    if sys.platform != "linux":
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here: the child only calls it
    parent = os.getpid()

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, int(death_signal), 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), death_signal)
    return arm


def reap_adopted(own: set[int]) -> None:
    """Reap exited orphans adopted as child subreaper (never the children this process started itself, in
    ``own``: their ``Popen`` reaps them)."""
    for child in psutil.Process().children():
        if child.pid in own:
            continue
        try:
            os.waitpid(child.pid, os.WNOHANG)
        except ChildProcessError:
            continue


def become_child_subreaper() -> None:
    """Orphaned descendants (the stream, once its launching task exits) are re-parented to this process, not to
    init: it still sees them, and can stop them (``up``, the soak)."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
