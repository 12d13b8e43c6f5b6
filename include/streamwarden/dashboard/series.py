"""The chart's series over the last hours: Kafka records committed per second, from the Delta history of the
stream's first table (one commit per batch, its offset ranges in the commit's metadata), and total lag, from
the supervisor's checks (:mod:`streamwarden.warden.lag_history`); and the stream's last measured rate from the
same history, which outlives the stream (its heartbeat has no rate once it stopped or restarted)."""

from __future__ import annotations

import json
from typing import Any

from streamwarden.dashboard.model import MeasuredRate, Series
from streamwarden.warden.lag_history import LagSample

RANGES_KEY = "streamwarden.ranges"
MAX_COMMITS = 5000
RATE_COMMITS = 20
"""The last measured rate is taken over at most this many stream commits (a minute at a 3 s trigger)."""
RATE_GAP_S = 120.0
"""Stream commits further apart than this are not one run of the stream: it stopped, or waited, in between."""


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


def series(history: list[dict[str, Any]], samples: list[LagSample], now: float, hours: float = 3.0,
           current_lag: int | None = None) -> Series:
    """Both series and the last measured rate; ``current_lag`` (this look's, None when not measured) ends the
    lag series."""
    lag = [(s.at, float(s.total_lag)) for s in samples if s.lag_known and s.at >= now - hours * 3600]
    if current_lag is not None:
        lag.append((now, float(current_lag)))
    return Series(throughput(history, now, hours), lag, hours, history_rate(history))
