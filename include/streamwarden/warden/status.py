"""``streamwarden status``: is the stream running, and what did it last do."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from streamwarden.logs.bounds import LogBounds
from streamwarden.logs.usage import LogUsage, measure_logs
from streamwarden.runfiles.failure_file import read_failure
from streamwarden.runfiles.heartbeat import read_heartbeat
from streamwarden.runfiles.lease import is_held, read_holder
from streamwarden.settings import Settings

T = TypeVar("T")


@dataclass(frozen=True)
class StreamStatus:
    """A snapshot of the stream's health as seen from its files."""

    running: bool
    pid: int | None
    heartbeat_age_s: float | None
    last_batch_id: int | None
    last_event: str | None
    heartbeat: dict[str, Any] | None
    last_failure: dict[str, Any] | None
    stop_requested: bool
    logs: LogUsage  # disk used by <run_root>/logs, and its bounds
    unreadable: dict[str, str] = field(default_factory=dict)  # run file -> why it could not be read

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def read_status(settings: Settings) -> StreamStatus:
    """Status from the lease, the heartbeat, the failure document and the logs folder; a corrupt file is
    reported, not fatal."""
    unreadable: dict[str, str] = {}

    def read(path: Path, reader: Callable[[Path], T | None]) -> T | None:
        try:
            return reader(path)
        except (OSError, ValueError, TypeError, KeyError) as exc:
            unreadable[str(path)] = f"{type(exc).__name__}: {exc}"
            return None

    holder = read(settings.lease_path, read_holder)
    running = is_held(settings.lease_path) and holder is not None and holder.is_alive()
    heartbeat = read(settings.run_paths.heartbeat, read_heartbeat)
    failure = read(settings.run_paths.failure, read_failure)
    return StreamStatus(
        running=running,
        pid=holder.pid if running and holder else None,
        heartbeat_age_s=round(heartbeat.age_seconds(), 3) if heartbeat else None,
        last_batch_id=heartbeat.batch_id if heartbeat else None,
        last_event=heartbeat.event if heartbeat else None,
        heartbeat=asdict(heartbeat) if heartbeat else None,
        last_failure=failure.to_json() if failure else None,
        stop_requested=settings.run_paths.stop_marker.exists(),
        logs=measure_logs(LogBounds.of(settings)),
        unreadable=unreadable,
    )
