"""The heartbeat document the running job writes on every progress and idle event."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from streamwarden.atomic import read_json, write_json_atomic


@dataclass(frozen=True)
class Heartbeat:
    """One observation of the running query (written atomically to ``<run_root>/heartbeat.json``)."""

    event: str  # started | progress | idle | terminated
    query_id: str
    run_id: str
    pid: int
    batch_id: int | None = None
    written_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    progress_timestamp: str | None = None
    num_input_rows: int = 0
    input_rows_per_second: float = 0.0
    processed_rows_per_second: float = 0.0
    batch_duration_ms: int | None = None
    trigger_interval_s: float | None = None
    end_offsets: dict[str, dict[str, int]] = field(default_factory=dict)
    latest_offsets: dict[str, dict[str, int]] = field(default_factory=dict)
    state: list[dict[str, Any]] = field(default_factory=list)
    durations_ms: dict[str, int] = field(default_factory=dict)
    batch_p99_ms: int | None = None  # this process's batches of the last hour, its first left out
    process_batches: int = 0  # batches this process has completed (its first warms up)

    def age_seconds(self, now: datetime | None = None) -> float:
        """Seconds since this heartbeat was written."""
        written = datetime.fromisoformat(self.written_at)
        return ((now or datetime.now(UTC)) - written).total_seconds()


def write_heartbeat(path: Path, heartbeat: Heartbeat) -> None:
    write_json_atomic(path, asdict(heartbeat))


def read_heartbeat(path: Path) -> Heartbeat | None:
    document = read_json(path)
    return None if document is None else Heartbeat(**document)
