"""The warm standby: a second stream process, its Spark session started, waiting for the checkpoint's lease.

While it waits it holds the standby lease (``<checkpoint_root>/<query>.standby``: one standby per checkpoint,
and the warden's way to see it from any host). The moment the stream's lease is free (its holder died, the
kernel dropped the lock) it takes it, gives the standby lease up for the next standby, and runs the query as
the stream. A stream stopped on purpose is not taken over: every stop stops the standby first
(:mod:`streamwarden.warden.stop`), and a standby does not take the lease while a recovery or an upgrade holds
the stream, nor keeps it when a stop was asked for as it took it.
"""

from __future__ import annotations

import logging
import time

from streamwarden.runfiles.hold import read_hold
from streamwarden.runfiles.lease import CheckpointLease, LeaseHeldError, LeaseHolder
from streamwarden.settings import Settings

log = logging.getLogger("streamwarden.stream.standby")

TAKEOVER_POLL_S = 0.5
"""How long each attempt on the stream's lease waits (the lock itself is retried every 20 ms within it)."""


def standby_lease(settings: Settings) -> CheckpointLease:
    return CheckpointLease(settings.standby_lease_path, settings.checkpoint_location)


def wait_to_take_over(settings: Settings, lease: CheckpointLease) -> LeaseHolder | None:
    """Hold the standby lease and wait for the stream's; the new holder, or ``None`` when the stream was
    stopped on purpose as it became free (the standby then stands down). :class:`LeaseHeldError` when another
    standby waits already."""
    standby = standby_lease(settings)
    mine = standby.acquire()
    log.info("standby ready (pid %d): waiting for the lease %s", mine.pid, settings.lease_path)
    try:
        while True:
            if read_hold(settings) is not None:  # a recovery or an upgrade: it stops this standby too
                time.sleep(TAKEOVER_POLL_S)
                continue
            try:
                holder = lease.acquire(within=TAKEOVER_POLL_S)
            except LeaseHeldError:
                continue
            if read_hold(settings) is None and not settings.run_paths.stop_marker.exists():
                log.info("the lease was free: taking over as the stream (%s)", holder)
                return holder
            lease.release()
            if settings.run_paths.stop_marker.exists():
                log.info("the stream was stopped on purpose; the standby stands down")
                return None
    finally:
        standby.release()
