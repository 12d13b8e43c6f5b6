"""The chart's series over the last hours: Kafka records committed per second, from the Delta history of the
stream's first table (one commit per batch, its offset ranges in the commit's metadata), and total lag, from
the supervisor's checks (:mod:`streamwarden.warden.lag_history`); and the stream's last measured rate from the
same history (:func:`streamwarden.tables.commit_rate.history_rate`)."""

from __future__ import annotations

from typing import Any

from streamwarden.dashboard.model import Series
from streamwarden.tables.commit_rate import history_rate, records_of
from streamwarden.warden.lag_history import LagSample

MAX_COMMITS = 5000
"""The chart reads at most this many commits of the table's history."""

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
    """Both series and the last measured rate; ``current_lag`` (this look's, None when not measured) ends the
    lag series."""
    lag = [(s.at, float(s.total_lag)) for s in samples if s.lag_known and s.at >= now - hours * 3600]
    if current_lag is not None:
        lag.append((now, float(current_lag)))
    return Series(throughput(history, now, hours), lag, hours, history_rate(history))
