"""The stream's health verdict, from the lease, the heartbeat, the checkpoint and the broker.

Signals (thresholds in :class:`~streamwarden.warden.settings.WardenSettings`):

* alive: a live process holds the checkpoint lease (a SIGSTOPped one is alive, and shows ``stopped``);
* progressing: heartbeat age <= max(3 x trigger, floor), and the batch id advances while records wait;
* keeping up: processed rate vs input rate, batch duration vs trigger (judged only while records wait);
* lag per topic-partition (high watermark - committed offset), judged by Burrow's rules (:mod:`.lag`)
  over a window kept in ``<run_root>/warden/health.json`` so successive checks see the history;
* retention risk: age of the oldest unprocessed record against the topic's ``retention.ms``.

Overall: ``FAILED`` (the job exited with a classified failure), ``DEAD`` (not running, no failure),
``STARTING`` (launched, no lease or first heartbeat yet, within the startup grace), ``HUNG`` (alive, not
progressing), ``DEGRADED`` (progressing, but behind, lagging or at retention risk), ``HEALTHY``.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

import psutil

from streamwarden.atomic import read_json, write_json_atomic
from streamwarden.failures import FailureClass
from streamwarden.runfiles.checkpoint import OffsetDoc, commit_batches, committed_offsets
from streamwarden.runfiles.failure_file import read_failure
from streamwarden.runfiles.heartbeat import Heartbeat, read_heartbeat
from streamwarden.runfiles.lease import LeaseHolder
from streamwarden.settings import Settings
from streamwarden.warden.broker_view import BrokerView, observe_broker
from streamwarden.warden.lag import LagObservation, LagStatus, evaluate, slide, worst
from streamwarden.warden.launcher import read_launch_record, running_holder
from streamwarden.warden.settings import WardenSettings


class Overall(StrEnum):
    """The one-word verdict."""

    HEALTHY = "HEALTHY"
    DEGRADED = "DEGRADED"
    STARTING = "STARTING"
    DEAD = "DEAD"
    HUNG = "HUNG"
    FAILED = "FAILED"


@dataclass(frozen=True)
class PartitionHealth:
    """Lag and retention risk of one topic-partition."""

    topic: str
    partition: int
    committed: int | None
    high_watermark: int
    lag: int
    status: LagStatus
    oldest_unprocessed_age_s: float | None = None
    retention_ms: int | None = None
    retention_at_risk: bool = False


@dataclass(frozen=True)
class HealthVerdict:
    """What a health check found (JSON in XCom, a table in the log)."""

    overall: Overall
    reasons: list[str]
    checked_at: str
    failure_class: FailureClass | None = None
    alive: bool = False
    pid: int | None = None
    process_state: str | None = None
    progressing: bool = False
    heartbeat_event: str | None = None
    heartbeat_age_s: float | None = None
    progress_threshold_s: float | None = None
    last_batch_id: int | None = None
    last_progress_at: str | None = None
    keeping_up: bool = True
    input_rows_per_second: float | None = None
    processed_rows_per_second: float | None = None
    batch_duration_ms: int | None = None
    trigger_interval_s: float | None = None
    lag_status: LagStatus = LagStatus.OK
    max_lag: int = 0
    total_lag: int = 0
    retention_at_risk: bool = False
    broker_error: str | None = None
    partitions: list[PartitionHealth] = field(default_factory=list)
    failure: dict[str, Any] | None = None

    @property
    def restartable(self) -> bool:
        """Dead, hung, or failed for a reason a restart can fix (ENVIRONMENT)."""
        return self.overall in (Overall.DEAD, Overall.HUNG) or self.failure_class is FailureClass.ENVIRONMENT

    @property
    def label(self) -> str:
        """``FAILED(INTEGRITY)`` or the plain overall verdict."""
        return f"FAILED({self.failure_class.value})" if self.failure_class else self.overall.value

    def to_json(self) -> dict[str, Any]:
        document = asdict(self)
        document["label"] = self.label
        return document

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> HealthVerdict:
        fields = {k: v for k, v in document.items() if k != "label"}
        fields["overall"] = Overall(fields["overall"])
        fields["lag_status"] = LagStatus(fields["lag_status"])
        if fields.get("failure_class"):
            fields["failure_class"] = FailureClass(fields["failure_class"])
        fields["partitions"] = [PartitionHealth(**{**p, "status": LagStatus(p["status"])})
                                for p in fields.get("partitions", [])]
        return cls(**fields)

    def table(self) -> str:
        """The verdict as a table a person reads at a glance, one line per partition below."""
        rows: list[tuple[str, Any]] = [
            ("verdict", self.label), ("reasons", "; ".join(self.reasons) or "-"),
            ("alive", f"{self.alive} (pid {self.pid}, {self.process_state})" if self.alive else False),
            ("progressing", self.progressing),
            ("heartbeat", f"{self.heartbeat_event}, {self.heartbeat_age_s}s old "
                          f"(limit {self.progress_threshold_s}s)" if self.heartbeat_event else None),
            ("last batch", f"{self.last_batch_id} at {self.last_progress_at}" if self.last_progress_at else None),
            ("keeping up", f"{self.keeping_up} (in {self.input_rows_per_second}/s, processed "
                           f"{self.processed_rows_per_second}/s, batch {self.batch_duration_ms} ms, "
                           f"trigger {self.trigger_interval_s}s)"),
            ("lag", f"{self.lag_status.value}: max {self.max_lag}, total {self.total_lag}"),
            ("retention risk", self.retention_at_risk), ("broker", self.broker_error or "ok"),
        ]
        width = max(len(name) for name, _ in rows)
        lines = [f"{name:<{width}} | {'-' if value is None else value}" for name, value in rows]
        if self.partitions:
            lines.append(f"{'topic[partition]':<32} {'committed':>12} {'high':>12} {'lag':>10} status  oldest(s)")
            lines.extend(
                f"{p.topic + f'[{p.partition}]':<32} {p.committed if p.committed is not None else '-':>12} "
                f"{p.high_watermark:>12} {p.lag:>10} {p.status.value:<6}  "
                f"{'-' if p.oldest_unprocessed_age_s is None else round(p.oldest_unprocessed_age_s, 1)}"
                f"{' AT RISK' if p.retention_at_risk else ''}"
                for p in self.partitions)
        return "\n".join(lines)


@dataclass(frozen=True)
class HealthState:
    """History kept between checks: lag windows, and since when the last batch id has been seen."""

    lag: dict[str, list[list[float | int]]] = field(default_factory=dict)
    batch: dict[str, Any] = field(default_factory=dict)  # pid, batch_id, since


@dataclass(frozen=True)
class Assessment:
    """A verdict and the history to keep if the verdict is acted upon (:meth:`commit`)."""

    verdict: HealthVerdict
    state: HealthState
    state_path: Path

    def commit(self) -> None:
        write_json_atomic(self.state_path, asdict(self.state))


def state_path(settings: Settings) -> Path:
    return settings.root("run") / "warden" / "health.json"


def assess(settings: Settings, warden: WardenSettings, now: float | None = None) -> Assessment:
    """Look at the stream's files and the broker and judge; nothing is written until ``commit()``."""
    now = time.time() if now is None else now
    path = state_path(settings)
    state = HealthState(**(read_json(path) or {}))
    checked_at = datetime.fromtimestamp(now, UTC).isoformat()
    holder = running_holder(settings)
    heartbeat = read_heartbeat(settings.heartbeat_path)
    committed = committed_offsets(settings.checkpoint_location) or {}
    broker = observe_broker(settings, committed, warden.broker_timeout, now)
    partitions, lag_windows = _judge_lag(settings, committed, broker, state, warden=warden, now=now)
    lag_fields = _lag_fields(partitions, broker)
    state = replace(state, lag=lag_windows)
    if holder is None:
        verdict = _not_running(settings, warden, now, checked_at, heartbeat=heartbeat, lag_fields=lag_fields)
        return Assessment(verdict, state, path)
    verdict, batch = _running(settings, warden, now, checked_at, holder=holder, heartbeat=heartbeat,
                            batch=state.batch, lag_fields=lag_fields)
    return Assessment(verdict, replace(state, batch=batch), path)


def _not_running(settings: Settings, warden: WardenSettings, now: float, checked_at: str, *,
                 heartbeat: Heartbeat | None, lag_fields: dict[str, Any]) -> HealthVerdict:
    base = _heartbeat_fields(heartbeat, now)
    launch = read_launch_record(settings)
    if launch is not None and launch.leader_alive() and \
            now - datetime.fromisoformat(launch.launched_at).timestamp() <= warden.startup_grace:
        return HealthVerdict(Overall.STARTING, [f"launched at {launch.launched_at}, no lease yet"], checked_at,
                             **base, **lag_fields)
    failure = read_failure(settings.failure_path)
    if failure is not None:
        reason = f"exited with {failure.failure_class.value} (exit {failure.exit_code}): {failure.message}"
        return HealthVerdict(Overall.FAILED, [reason], checked_at, failure_class=failure.failure_class,
                             failure=failure.to_json(), **base, **lag_fields)
    return HealthVerdict(Overall.DEAD, ["no live process holds the checkpoint lease"], checked_at,
                         **base, **lag_fields)


def _running(settings: Settings, warden: WardenSettings, now: float, checked_at: str, *, holder: LeaseHolder,
             heartbeat: Heartbeat | None, batch: dict[str, Any],
             lag_fields: dict[str, Any]) -> tuple[HealthVerdict, dict[str, Any]]:
    process_state = _process_state(holder)
    alive: dict[str, Any] = {"alive": True, "pid": holder.pid, "process_state": process_state}
    trigger = (heartbeat.trigger_interval_s if heartbeat and heartbeat.trigger_interval_s
               else settings.trigger_interval)
    threshold = max(3 * trigger, warden.heartbeat_floor)
    if heartbeat is None or heartbeat.pid != holder.pid:
        started = datetime.fromisoformat(holder.started_at).timestamp()
        fields = {**alive, **_heartbeat_fields(None, now), "progress_threshold_s": threshold, **lag_fields}
        if now - started <= warden.startup_grace:
            return HealthVerdict(Overall.STARTING, [f"lease taken at {holder.started_at}, no heartbeat yet"],
                                 checked_at, **fields), {}
        return HealthVerdict(Overall.HUNG, [f"no heartbeat {now - started:.0f}s after the lease was taken "
                                            f"(grace {warden.startup_grace:g}s)"], checked_at, **fields), {}

    if batch.get("pid") != holder.pid or batch.get("batch_id") != heartbeat.batch_id:
        batch = {"pid": holder.pid, "batch_id": heartbeat.batch_id, "since": now}
    reasons: list[str] = []
    age = heartbeat.age_seconds(datetime.fromtimestamp(now, UTC))
    stuck_for = now - float(batch["since"])
    stale = age > threshold
    stuck = lag_fields["total_lag"] > 0 and stuck_for > threshold
    if stale:
        reasons.append(f"heartbeat is {age:.0f}s old (limit {threshold:g}s)")
    if stuck:
        reasons.append(f"batch {heartbeat.batch_id} unchanged for {stuck_for:.0f}s while "
                       f"{lag_fields['total_lag']} records wait")
    if process_state == psutil.STATUS_STOPPED:
        reasons.append("the lease holder process is stopped (SIGSTOP)")
    progressing = not (stale or stuck)
    keeping_up = _keeping_up(heartbeat, lag_fields["total_lag"], trigger, warden, reasons)
    if lag_fields["lag_status"] is not LagStatus.OK:
        reasons.append(f"lag {lag_fields['lag_status'].value} (Burrow)")
    if lag_fields["retention_at_risk"]:
        reasons.append("unprocessed records near the end of their retention")
    if lag_fields["broker_error"]:
        reasons.append(f"broker: {lag_fields['broker_error']}")
    overall = Overall.HUNG if not progressing else Overall.DEGRADED if reasons else Overall.HEALTHY
    verdict = HealthVerdict(overall, reasons, checked_at, **alive, progressing=progressing,
                            progress_threshold_s=threshold, keeping_up=keeping_up,
                            **_heartbeat_fields(heartbeat, now), **lag_fields)
    return verdict, batch


def _keeping_up(heartbeat: Heartbeat, total_lag: int, trigger: float, warden: WardenSettings,
                reasons: list[str]) -> bool:
    """Judged only while records wait: an idle stream with no lag keeps up by definition."""
    if total_lag == 0 or heartbeat.batch_duration_ms is None:
        return True
    slow_rate = heartbeat.processed_rows_per_second < warden.keepup_ratio * heartbeat.input_rows_per_second
    slow_batch = heartbeat.batch_duration_ms > warden.batch_overrun * trigger * 1000
    if slow_rate:
        reasons.append(f"processing {heartbeat.processed_rows_per_second:.0f} rows/s < "
                       f"{warden.keepup_ratio:g} x input {heartbeat.input_rows_per_second:.0f} rows/s")
    if slow_batch:
        reasons.append(f"batch took {heartbeat.batch_duration_ms} ms > {warden.batch_overrun:g} x trigger")
    return not (slow_rate or slow_batch)


def _heartbeat_fields(heartbeat: Heartbeat | None, now: float) -> dict[str, Any]:
    if heartbeat is None:
        return {}
    return {
        "heartbeat_event": heartbeat.event,
        "heartbeat_age_s": round(heartbeat.age_seconds(datetime.fromtimestamp(now, UTC)), 3),
        "last_batch_id": heartbeat.batch_id, "last_progress_at": heartbeat.written_at,
        "input_rows_per_second": heartbeat.input_rows_per_second,
        "processed_rows_per_second": heartbeat.processed_rows_per_second,
        "batch_duration_ms": heartbeat.batch_duration_ms, "trigger_interval_s": heartbeat.trigger_interval_s,
    }


def _process_state(holder: LeaseHolder) -> str | None:
    try:
        return str(psutil.Process(holder.pid).status())
    except psutil.NoSuchProcess:
        return None  # another host, or gone since the lease was read


def _judge_lag(settings: Settings, committed: OffsetDoc, broker: BrokerView, state: HealthState, *,
               warden: WardenSettings, now: float
               ) -> tuple[list[PartitionHealth], dict[str, list[list[float | int]]]]:
    commits = commit_batches(settings.checkpoint_location)
    committed_at = (settings.checkpoint_location / "commits" / str(commits[-1])).stat().st_mtime if commits \
        else now
    windows: dict[str, list[list[float | int]]] = {}
    found = []
    for tp, (low, high) in sorted(broker.watermarks.items()):
        key = f"{tp.topic}:{tp.partition}"
        position = committed.get(tp.topic, {}).get(str(tp.partition))
        observation = LagObservation(now, low if position is None else position, high, committed_at)
        window = slide([LagObservation.from_json(r) for r in state.lag.get(key, [])], observation,
                       warden.lag_window)
        windows[key] = [o.to_json() for o in window]
        retention = broker.retention_ms.get(tp.topic)
        age = broker.oldest_unprocessed_age_s.get(tp)
        at_risk = retention is not None and retention > 0 and age is not None and \
            age * 1000 >= warden.retention_risk * retention
        found.append(PartitionHealth(tp.topic, tp.partition, position, high, observation.lag,
                                     evaluate(window, now), age, retention, at_risk))
    return found, windows


def _lag_fields(partitions: list[PartitionHealth], broker: BrokerView) -> dict[str, Any]:
    return {
        "partitions": partitions,
        "lag_status": LagStatus.ERR if broker.error else worst([p.status for p in partitions]),
        "max_lag": max((p.lag for p in partitions), default=0),
        "total_lag": sum(p.lag for p in partitions),
        "retention_at_risk": any(p.retention_at_risk for p in partitions),
        "broker_error": broker.error,
    }
