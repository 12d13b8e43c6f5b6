"""A bounded series of the supervisor's health checks (total lag and rates), for charts over the last hours.

Burrow's windows in ``<run_root>/warden/health.json`` hold only the last checks of the current start; every
check of ``stream_supervisor`` also appends one sample here (``<run_root>/warden/lag_history.json``: time,
total lag, input and processed rows per second, whether the lag was measured), kept for ``KEEP_S`` (24 h) and
at most ``MAX_SAMPLES``. A check whose broker could not be asked keeps its sample (its rates, its time) with
``lag_known`` false: charts leave its lag out rather than draw a drop to 0.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass

from streamwarden.atomic import read_json, write_json_atomic
from streamwarden.settings import Settings
from streamwarden.warden.health import HealthVerdict

KEEP_S = 24 * 3600.0
MAX_SAMPLES = 2000


@dataclass(frozen=True)
class LagSample:
    """One health check: when (epoch seconds), the total lag (0 when not measured: ``lag_known`` false), and
    the heartbeat's rates (None without one)."""

    at: float
    total_lag: int
    input_rows_per_second: float | None
    processed_rows_per_second: float | None
    lag_known: bool = True

    @classmethod
    def of(cls, verdict: HealthVerdict, at: float) -> LagSample:
        beat, lag = verdict.heartbeat, verdict.lag
        return cls(at, lag.total_lag, beat.input_rows_per_second, beat.processed_rows_per_second, lag.measured)


def read_lag_history(settings: Settings) -> list[LagSample]:
    """The samples kept, oldest first ([] before the first check, or when the file is unreadable)."""
    try:
        document = read_json(settings.run_paths.lag_history) or {}
        return [LagSample(float(r[0]), int(r[1]), r[2], r[3], bool(r[4]) if len(r) > 4 else True)
                for r in document.get("samples", [])]
    except (OSError, ValueError, TypeError, IndexError):
        return []


def append_lag_sample(settings: Settings, verdict: HealthVerdict, at: float) -> list[LagSample]:
    """Add the verdict's sample; drop samples older than ``KEEP_S`` before ``at`` and beyond ``MAX_SAMPLES``."""
    samples = [s for s in read_lag_history(settings) if at - KEEP_S <= s.at < at]
    samples = [*samples, LagSample.of(verdict, at)][-MAX_SAMPLES:]
    write_json_atomic(settings.run_paths.lag_history, {"samples": [list(astuple(s)) for s in samples]})
    return samples
