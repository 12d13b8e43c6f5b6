"""``streamwarden status``: is the stream running, and what did it last do."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from streamwarden.runfiles.failure_file import read_failure
from streamwarden.runfiles.heartbeat import read_heartbeat
from streamwarden.runfiles.lease import is_held, read_holder
from streamwarden.settings import Settings


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

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def read_status(settings: Settings) -> StreamStatus:
    """Status from the lease, the heartbeat and the failure document."""
    holder = read_holder(settings.lease_path)
    running = is_held(settings.lease_path) and holder is not None and holder.is_alive()
    heartbeat = read_heartbeat(settings.heartbeat_path)
    failure = read_failure(settings.failure_path)
    return StreamStatus(
        running=running,
        pid=holder.pid if running and holder else None,
        heartbeat_age_s=round(heartbeat.age_seconds(), 3) if heartbeat else None,
        last_batch_id=heartbeat.batch_id if heartbeat else None,
        last_event=heartbeat.event if heartbeat else None,
        heartbeat=asdict(heartbeat) if heartbeat else None,
        last_failure=failure.to_json() if failure else None,
        stop_requested=settings.stop_marker_path.exists(),
    )
