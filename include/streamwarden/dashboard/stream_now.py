"""The stream now, from the warden's health verdict (assessed, never committed) and the lease holder."""

from __future__ import annotations

from datetime import UTC, datetime

from streamwarden.dashboard.model import PartitionLag, StreamNow
from streamwarden.runfiles.lease import LeaseHolder
from streamwarden.warden.health import HealthVerdict, Overall

STATES = {Overall.HEALTHY: "running", Overall.DEGRADED: "running", Overall.STARTING: "starting",
          Overall.HUNG: "hung", Overall.FAILED: "failed", Overall.DEAD: "stopped"}
"""The page's word for each verdict (a degraded stream runs; its reasons say why it is degraded)."""


def stream_now(verdict: HealthVerdict, holder: LeaseHolder | None, now: float) -> StreamNow:
    """The section from a verdict and the lease holder that was running when it was made (None: none)."""
    beat, lag = verdict.heartbeat, verdict.lag
    started = holder.started_at if holder is not None and verdict.alive else None
    uptime = None if started is None else max(0.0, now - datetime.fromisoformat(started).timestamp())
    partitions = [PartitionLag(p.topic, p.partition, p.committed, p.high_watermark, p.lag, p.status.value,
                               p.retention_at_risk) for p in lag.partitions]
    return StreamNow(
        state=STATES[verdict.overall], verdict=verdict.label, reasons=list(verdict.reasons),
        failure_class=None if verdict.failure_class is None else verdict.failure_class.value,
        failure_message=verdict.failure.message if verdict.failure else None, pid=verdict.pid,
        started_at=started, uptime_s=None if uptime is None else round(uptime, 1),
        last_batch_id=beat.last_batch_id, last_batch_at=beat.last_progress_at,
        last_batch_age_s=_age(beat.last_progress_at, now), input_rows_per_second=beat.input_rows_per_second,
        processed_rows_per_second=beat.processed_rows_per_second, batch_duration_ms=beat.batch_duration_ms,
        trigger_interval_s=beat.trigger_interval_s, lag_status=lag.lag_status.value,
        total_lag=lag.total_lag if lag.measured else None, max_lag=lag.max_lag if lag.measured else None,
        broker_error=lag.broker_error, partitions=partitions, lag_lower_bound=lag.lower_bound,
        broker_notes=list(lag.broker_notes))


def _age(moment: str | None, now: float) -> float | None:
    if moment is None:
        return None
    at = datetime.fromisoformat(moment)
    return round(max(0.0, now - (at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp()), 1)
