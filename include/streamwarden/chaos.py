"""Fault injection for tests: kill this process at a named point of a protocol, as ``kill -9`` would.

Set ``STREAMWARDEN_CHAOS_KILL_AT`` to a point name (the commit protocol has ``before_intent``,
``after_intent``, ``mid_move``, ``after_move``, ``after_manifest``); when the running code reaches that
point the process sends itself ``SIGKILL``: no ``finally``, no ``atexit``, no flush. Unset (the normal
case) it costs one environment lookup. Never set it outside tests.
"""

from __future__ import annotations

import os
import signal

CHAOS_ENV = "STREAMWARDEN_CHAOS_KILL_AT"


def chaos_point(name: str) -> None:
    """SIGKILL this process when ``STREAMWARDEN_CHAOS_KILL_AT`` equals ``name``; otherwise do nothing."""
    if os.environ.get(CHAOS_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
