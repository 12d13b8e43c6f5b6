"""What the logs folder holds on disk, beside its bounds (reported by ``streamwarden status``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from streamwarden.logs.bounds import LogBounds


@dataclass(frozen=True)
class LogUsage:
    """Bytes and files under the logs folder, and the bounds each log is held to."""

    folder: str
    bytes: int
    files: int
    max_bytes: int
    backups: int
    max_age_s: float
    per_log_bound_bytes: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def measure_logs(bounds: LogBounds) -> LogUsage:
    """Sum the sizes of every file under the logs folder (none yet: zero)."""
    total = count = 0
    if bounds.folder.is_dir():
        for path in bounds.folder.rglob("*"):
            try:
                if path.is_file():
                    total += path.stat().st_size
                    count += 1
            except FileNotFoundError:
                continue  # deleted by a rollover while we walked
    return LogUsage(str(bounds.folder), total, count, bounds.max_bytes, bounds.backups, bounds.max_age,
                    bounds.per_log_bytes)
