"""Fault injection for tests: die or fail at a named point of a protocol.

* ``STREAMWARDEN_CHAOS_KILL_AT=<point>``: the process sends itself ``SIGKILL`` there, as ``kill -9``
  would: no ``finally``, no ``atexit``, no flush.
* ``STREAMWARDEN_CHAOS_RAISE_AT=<point>:<CLASS>``: raises a classified error there (``BUG`` raises a
  plain ``RuntimeError``), to exercise the classified exit of the job.

Points of the Delta commit (:mod:`streamwarden.stream.sink.delta_sink`): ``before_commit`` (files
written, not committed) and ``after_commit`` (one table committed, the next not yet). Unset (the normal
case) a point costs two environment lookups. Never set outside tests.
"""

from __future__ import annotations

import os
import signal

from streamwarden import failures

CHAOS_ENV = "STREAMWARDEN_CHAOS_KILL_AT"
CHAOS_RAISE_ENV = "STREAMWARDEN_CHAOS_RAISE_AT"
_ERRORS: dict[str, type[failures.StreamwardenError]] = {
    "ENVIRONMENT": failures.EnvironmentFailure,
    "DATA_LOSS": failures.DataLossError,
    "INTEGRITY": failures.IntegrityError,
    "MALFORMED": failures.MalformedDataError,
    "CONFIG": failures.ConfigError,
}


def chaos_point(name: str) -> None:
    """Kill or fail here when the chaos environment names this point; otherwise do nothing."""
    if os.environ.get(CHAOS_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
    point, _, failure_class = os.environ.get(CHAOS_RAISE_ENV, "").partition(":")
    if point == name:
        message = f"chaos: injected {failure_class or 'BUG'} failure at {name}"
        error = _ERRORS.get(failure_class)
        if error is None:
            raise RuntimeError(message)
        raise error(message, topic="chaos", partition=0, offset=0)
