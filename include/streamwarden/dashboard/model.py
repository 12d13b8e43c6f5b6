"""The page's sections as typed records, and their JSON form."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from streamwarden.tables.commit_rate import MeasuredRate


@dataclass(frozen=True)
class PartitionLag:
    """Lag of one topic-partition and Burrow's verdict on it."""

    topic: str
    partition: int
    committed: int | None
    high_watermark: int
    lag: int
    status: str
    retention_at_risk: bool


@dataclass(frozen=True)
class StreamNow:
    """The stream now: ``state`` is running, starting, hung, failed or stopped; ``verdict`` the warden's label."""

    state: str
    verdict: str
    reasons: list[str]
    failure_class: str | None
    failure_message: str | None
    pid: int | None
    started_at: str | None
    uptime_s: float | None
    last_batch_id: int | None
    last_batch_at: str | None
    last_batch_age_s: float | None
    input_rows_per_second: float | None
    processed_rows_per_second: float | None
    batch_duration_ms: int | None
    trigger_interval_s: float | None
    lag_status: str
    total_lag: int | None  # None: not measured (broker_error says why)
    max_lag: int | None
    broker_error: str | None
    partitions: list[PartitionLag] = field(default_factory=list)
    lag_lower_bound: bool = False  # the high watermarks are ListOffsets': each lag is at least its figure
    broker_notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class SiteNow:
    """One collection site (a topic): its sessions' clean starts, exposure against the limit, quarantine share."""

    site: str
    last_clean_start: str | None
    newest_clean_start: str | None
    open_sessions: int
    damaged_sessions: int
    exposure_s: float | None
    over_limit: bool
    rows: int
    quarantined: int
    quarantine_share: float | None


@dataclass(frozen=True)
class Sites:
    """Every site, the restart interval and the exposure limit (None: no restart schedule), the last restart run."""

    interval_s: float | None
    limit_s: float | None
    sites: list[SiteNow] = field(default_factory=list)
    last_restart_run: dict[str, Any] | None = None
    note: str | None = None


@dataclass(frozen=True)
class TableNow:
    """One output table: its head, files, maintenance and validation."""

    name: str
    exists: bool
    version: int | None
    rows: int
    files: int
    bytes: int
    small_files: int | None  # None: not partitioned, so not maintained
    last_commit_at: str | None
    last_compaction_at: str | None
    last_maintenance: dict[str, Any] | None
    validation_passed: bool | None
    validation_at: str | None
    validation_classes: dict[str, int]
    validated_version_in_last_run: int | None
    data_docs: str | None
    last_validated_version: int | None
    last_validated_at: str | None


@dataclass(frozen=True)
class DagAction:
    """A DAG a next action names, and the Params it gives for the run (None: none given)."""

    dag_id: str
    params: dict[str, Any] | None


@dataclass(frozen=True)
class AlertNow:
    """A recorded alert and the DAGs (with their Params) its next action names."""

    raised_at: str
    severity: str
    summary: str
    next_action: str
    source: str
    actions: list[DagAction] = field(default_factory=list)


@dataclass(frozen=True)
class Series:
    """Points ``[epoch seconds, value]`` oldest first: Kafka records committed per second (from the tables'
    history) and total lag (from the supervisor's checks, :mod:`streamwarden.warden.lag_history`; checks that
    could not measure it left out); and the stream's last measured rate from the same history."""

    throughput: list[tuple[float, float]] = field(default_factory=list)
    lag: list[tuple[float, float]] = field(default_factory=list)
    hours: float = 3.0
    last_rate: MeasuredRate | None = None


@dataclass(frozen=True)
class Dashboard:
    """Everything the page shows; ``errors`` names a section that could not be read, and why."""

    generated_at: str
    stream: StreamNow | None
    sites: Sites | None
    tables: list[TableNow]
    alerts: list[AlertNow]
    series: Series
    last_recovery: dict[str, Any] | None = None
    errors: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
