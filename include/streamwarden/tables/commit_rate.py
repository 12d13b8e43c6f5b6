"""The stream's commits in a table's Delta history: the offset ranges each one carries, the records they cover,
and the stream's last measured rate over them (which outlives the stream: its heartbeat has no rate once it
stopped or restarted)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

RANGES_KEY = "streamwarden.ranges"
"""The commit-info key of a stream commit's offset ranges (``{topic: {partition: [start, end]}}`` as JSON)."""
RATE_COMMITS = 20
"""The last measured rate is taken over at most this many stream commits (a minute at a 3 s trigger)."""
RATE_GAP_S = 120.0
"""Stream commits further apart than this are not one run of the stream: it stopped, or waited, in between."""


@dataclass(frozen=True)
class MeasuredRate:
    """Kafka records per second the stream committed over its last run of commits (the Delta history's), and
    over which commits (times in epoch seconds)."""

    records_per_second: float
    commits: int
    since: float
    until: float

    def basis(self) -> str:
        """``over 20 stream commits until 2026-11-27 10:03:12 UTC``."""
        until = datetime.fromtimestamp(self.until, UTC).strftime("%Y-%m-%d %H:%M:%S")
        return f"over {self.commits} stream commits until {until} UTC"

    def describe(self) -> str:
        """``2,003 records/s over 20 stream commits until 2026-11-27 10:03:12 UTC``."""
        return f"{self.records_per_second:,.0f} records/s {self.basis()}"


def records_of(commit: dict[str, Any]) -> int | None:
    """The Kafka records a stream commit covers (sum of its ``[start, end)`` ranges); None for other commits."""
    ranges = commit.get(RANGES_KEY)
    if ranges is None:
        ranges = (commit.get("customMetadata") or {}).get(RANGES_KEY) if isinstance(
            commit.get("customMetadata"), dict) else None
    if ranges is None:
        return None
    document = json.loads(ranges) if isinstance(ranges, str) else ranges
    return sum(int(bounds[1]) - int(bounds[0]) for parts in document.values() for bounds in parts.values())


def history_rate(history: list[dict[str, Any]]) -> MeasuredRate | None:
    """The stream's last measured rate: over the newest run of at least two stream commits no more than
    ``RATE_GAP_S`` apart (at most ``RATE_COMMITS``), the records committed after the run's first commit over the
    time from it to the last. None when the history holds no such run."""
    commits = sorted(((float(c.get("timestamp", 0)) / 1000, records) for c in history
                      if (records := records_of(c)) is not None), reverse=True)
    run: list[tuple[float, int]] = []
    for at, records in commits:
        if run and run[-1][0] - at > RATE_GAP_S:
            if len(run) >= 2:
                break
            run = []  # a lone commit (a start that died at once) says nothing of a rate
        run.append((at, records))
        if len(run) == RATE_COMMITS:
            break
    span = run[0][0] - run[-1][0] if len(run) >= 2 else 0.0
    if span <= 0:
        return None
    return MeasuredRate(round(sum(records for _, records in run[:-1]) / span, 3), len(run), run[-1][0], run[0][0])
