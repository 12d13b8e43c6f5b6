"""The chart's series over the last hours: Kafka records committed per second, from the Delta history of the
stream's first table (one commit per batch, its offset ranges in the commit's metadata), and total lag, from
the supervisor's checks (:mod:`streamwarden.warden.lag_history`)."""

from __future__ import annotations

import json
from typing import Any

from streamwarden.dashboard.model import Series
from streamwarden.warden.lag_history import LagSample

RANGES_KEY = "streamwarden.ranges"
MAX_COMMITS = 5000


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


def throughput(history: list[dict[str, Any]], now: float, hours: float, bucket_s: float = 60.0
               ) -> list[tuple[float, float]]:
    """Records per second in ``bucket_s`` buckets over the last ``hours`` (buckets without a commit left out)."""
    since = now - hours * 3600
    buckets: dict[int, int] = {}
    for commit in history:
        at = float(commit.get("timestamp", 0)) / 1000
        records = records_of(commit)
        if records is None or at < since:
            continue
        key = int(at // bucket_s)
        buckets[key] = buckets.get(key, 0) + records
    return [(key * bucket_s, round(count / bucket_s, 3)) for key, count in sorted(buckets.items())]


def series(history: list[dict[str, Any]], samples: list[LagSample], now: float, hours: float = 3.0,
           current_lag: int | None = None) -> Series:
    """Both series; ``current_lag`` (this look's) ends the lag series."""
    lag = [(s.at, float(s.total_lag)) for s in samples if s.at >= now - hours * 3600]
    if current_lag is not None:
        lag.append((now, float(current_lag)))
    return Series(throughput(history, now, hours), lag, hours)
