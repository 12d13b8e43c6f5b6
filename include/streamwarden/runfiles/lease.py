"""Single-instance lease on a checkpoint: a second stream on the same checkpoint refuses to start.

The lease is an ``fcntl`` lock on ``<checkpoint_root>/<query>.lease`` held for the life of the driver
process, plus a JSON body naming the holder (host, pid, process group, start time) that the warden reads.
The kernel drops the lock when the holder dies, however it dies, so a lease left by a dead process is
taken over by the next start without any expiry guesswork. (Local and NFSv4 filesystems; object stores
cannot hold a lock.)
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import psutil


@dataclass(frozen=True)
class LeaseHolder:
    """Who holds (or last held) the lease."""

    pid: int
    pgid: int
    host: str
    checkpoint: str
    started_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())

    def is_alive(self) -> bool:
        """True when the holder runs on this host and its process still exists (and is not a zombie)."""
        if self.host != socket.gethostname():
            return True  # cannot see another host's processes: trust the lock
        try:
            return psutil.Process(self.pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False


def describe_holder(holder: LeaseHolder | None) -> str:
    """Who holds a lease, in words: ``pid 123 on host since <time>``, or ``another process`` when unknown."""
    return f"pid {holder.pid} on {holder.host} since {holder.started_at}" if holder else "another process"


class LeaseHeldError(RuntimeError):
    """Another live process holds the lease."""

    def __init__(self, path: Path, holder: LeaseHolder | None) -> None:
        self.holder = holder
        super().__init__(f"checkpoint lease {path} is held by {describe_holder(holder)}; "
                         "refusing to start a second instance")


def read_holder(path: Path) -> LeaseHolder | None:
    """The holder recorded in the lease file, whether or not it is still alive."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        data: dict[str, Any] = json.loads(text)
        return LeaseHolder(**data)
    except (json.JSONDecodeError, TypeError):
        return None


def is_held(path: Path) -> bool:
    """True when some process holds the lease right now.

    The probe takes a *shared* lock for an instant: probes (``up``, the warden, the page, every second) never
    see each other as a holder, and a start that meets one waits it out (:data:`PROBE_WAIT_S`)."""
    try:
        handle = open(path, "a+")  # noqa: SIM115
    except FileNotFoundError:
        return False
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


PROBE_WAIT_S = 2.0
"""How long a start retries a lock it did not get: a probe holds it for microseconds, a holder for its life."""
_RETRY_S = 0.02


def _lock_within(handle: IO[str], seconds: float) -> bool:
    """Take the exclusive lock, retrying for ``seconds`` past a probe's shared lock; False when it stays held."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(_RETRY_S)


class CheckpointLease:
    """Context manager holding the lease for the current process."""

    def __init__(self, path: Path, checkpoint: Path) -> None:
        self.path = path
        self.checkpoint = checkpoint
        self._handle: IO[str] | None = None

    def acquire(self, within: float = PROBE_WAIT_S) -> LeaseHolder:
        """Take the lease within ``within`` seconds, or :class:`LeaseHeldError` naming its holder."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")  # noqa: SIM115 - held open for the process lifetime
        if not _lock_within(handle, within):
            handle.close()
            raise LeaseHeldError(self.path, read_holder(self.path))
        holder = LeaseHolder(os.getpid(), os.getpgid(0), socket.gethostname(), str(self.checkpoint))
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps(asdict(holder), sort_keys=True))
        handle.flush()
        os.fsync(handle.fileno())
        self._handle = handle
        return holder

    def release(self) -> None:
        if self._handle is not None:
            fcntl.flock(self._handle, fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None

    def __enter__(self) -> LeaseHolder:
        return self.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self.release()
