"""The stream's health verdict, from the lease, the heartbeat, the checkpoint and the broker.

Signals (thresholds in :class:`~streamwarden.warden.settings.WardenSettings`):

* alive: a live process holds the checkpoint lease (a SIGSTOPped one is alive, and shows ``stopped``);
* progressing: heartbeat age <= the progress limit (:mod:`.limits`: the start-up grace until the first batch,
  then max(3 x trigger, floor, 3 x p99 batch)), and the batch id advances while records wait;
* keeping up: processed rate vs input rate, batch duration vs trigger (judged only while records wait);
* lag per topic-partition (high watermark - committed offset), judged by Burrow's rules (:mod:`.lag`)
  over a window kept in ``<run_root>/warden/health.json`` so successive checks see the history; only checks
  of the current start count, and before its first commit the lag is ``STARTING``. It is measured whether
  the stream runs or not (the committed position is the checkpoint's): when the broker's fetch-based
  watermark query fails, from ListOffsets (each lag then a lower bound, said so); when the broker cannot be
  asked at all, the lag is ``UNKNOWN`` with the reason, never a total of 0;
* retention risk: age of the oldest unprocessed record against the topic's ``retention.ms``.

Overall: ``FAILED`` (the job exited with a classified failure), ``DEAD`` (not running, no failure),
``STARTING`` (launched, no lease or first heartbeat yet, within the startup grace), ``HUNG`` (alive, not
progressing), ``DEGRADED`` (progressing, but behind, lagging or at retention risk), ``HEALTHY``.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

import psutil

from streamwarden.atomic import read_json, write_json_atomic
from streamwarden.failures import FailureClass, FailureDocument
from streamwarden.runfiles.checkpoint import OffsetDoc, commit_batches, committed_offsets
from streamwarden.runfiles.failure_file import read_failure
from streamwarden.runfiles.heartbeat import Heartbeat, read_heartbeat
from streamwarden.runfiles.lease import LeaseHolder
from streamwarden.settings import Settings
from streamwarden.warden.broker_view import BrokerView, observe_broker
from streamwarden.warden.lag import LagObservation, LagStatus, evaluate, slide, worst
from streamwarden.warden.launcher import running_holder, running_standby, starting_launch
from streamwarden.warden.limits import progress_limit
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

    @classmethod
    def from_json(cls, row: dict[str, Any]) -> PartitionHealth:
        return cls(**{**row, "status": LagStatus(row["status"])})


@dataclass(frozen=True)
class LagFacts:
    """What the broker and the checkpoint say about the input: lag per partition, its worst status and sums,
    retention risk.

    ``broker_error``: the broker could not be asked, so no lag was measured: ``UNKNOWN`` (the sums are 0 here,
    ``None`` in the JSON form, and never shown as figures). ``lower_bound``: the high watermarks are
    ListOffsets' (the fetch-based query failed), so each lag is at least its figure. ``broker_notes``: what
    else the broker did not answer, and why.
    """

    lag_status: LagStatus = LagStatus.OK
    max_lag: int = 0
    total_lag: int = 0
    retention_at_risk: bool = False
    broker_error: str | None = None
    partitions: list[PartitionHealth] = field(default_factory=list)
    lower_bound: bool = False
    broker_notes: list[str] = field(default_factory=list)

    @property
    def measured(self) -> bool:
        return self.broker_error is None

    @classmethod
    def of(cls, partitions: list[PartitionHealth], broker: BrokerView) -> LagFacts:
        return cls(lag_status=LagStatus.UNKNOWN if broker.error else worst([p.status for p in partitions]),
                   max_lag=max((p.lag for p in partitions), default=0), total_lag=sum(p.lag for p in partitions),
                   retention_at_risk=any(p.retention_at_risk for p in partitions), broker_error=broker.error,
                   partitions=partitions, lower_bound=broker.listed, broker_notes=list(broker.notes))

    def describe(self) -> str:
        """``STOP: max 1,200, total 3,400``, ``at least`` before lower bounds, or unknown and why."""
        if self.broker_error is not None:
            return f"{self.lag_status.value}: not measured, the broker could not be asked ({self.broker_error})"
        least = "at least " if self.lower_bound else ""
        return f"{self.lag_status.value}: max {least}{self.max_lag:,}, total {least}{self.total_lag:,}"

    def to_json(self) -> dict[str, Any]:
        """Flat fields; the sums ``None`` when not measured."""
        document = asdict(self)
        if not self.measured:
            document.update(max_lag=None, total_lag=None)
        return document

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> LagFacts:
        """From a verdict's flat JSON form (one written before ``lower_bound`` and ``broker_notes`` too)."""
        return cls(LagStatus(document["lag_status"]), document["max_lag"] or 0, document["total_lag"] or 0,
                   document["retention_at_risk"], document["broker_error"],
                   [PartitionHealth.from_json(p) for p in document["partitions"]],
                   document.get("lower_bound", False), list(document.get("broker_notes", [])))


@dataclass(frozen=True)
class HeartbeatFacts:
    """What the stream's last heartbeat says (all ``None`` without one, or when it is not the lease holder's)."""

    heartbeat_event: str | None = None
    heartbeat_age_s: float | None = None
    last_batch_id: int | None = None
    last_progress_at: str | None = None
    input_rows_per_second: float | None = None
    processed_rows_per_second: float | None = None
    batch_duration_ms: int | None = None
    trigger_interval_s: float | None = None

    @classmethod
    def of(cls, heartbeat: Heartbeat | None, now: float) -> HeartbeatFacts:
        if heartbeat is None:
            return cls()
        return cls(heartbeat.event, round(heartbeat.age_seconds(datetime.fromtimestamp(now, UTC)), 3),
                   heartbeat.batch_id, heartbeat.written_at, heartbeat.input_rows_per_second,
                   heartbeat.processed_rows_per_second, heartbeat.batch_duration_ms, heartbeat.trigger_interval_s)

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> HeartbeatFacts:
        """From a verdict's flat JSON form."""
        return cls(**{f.name: document[f.name] for f in fields(cls)})


@dataclass(frozen=True)
class HealthVerdict:
    """What a health check found (flat JSON in XCom and alerts, a table in the log)."""

    overall: Overall
    reasons: list[str]
    checked_at: str
    alive: bool = False
    pid: int | None = None
    process_state: str | None = None
    progressing: bool = False
    progress_threshold_s: float | None = None
    keeping_up: bool = True
    heartbeat: HeartbeatFacts = field(default_factory=HeartbeatFacts)
    lag: LagFacts = field(default_factory=LagFacts)
    failure: FailureDocument | None = None
    standby_pid: int | None = None  # a warm standby waiting for the lease (STREAMWARDEN_WARDEN_STANDBY)

    @property
    def failure_class(self) -> FailureClass | None:
        return self.failure.failure_class if self.failure else None

    @property
    def restartable(self) -> bool:
        """Dead, hung, or failed for a reason a restart can fix (ENVIRONMENT)."""
        return self.overall in (Overall.DEAD, Overall.HUNG) or self.failure_class is FailureClass.ENVIRONMENT

    @property
    def label(self) -> str:
        """``FAILED(INTEGRITY)`` or the plain overall verdict."""
        return f"FAILED({self.failure_class.value})" if self.failure_class else self.overall.value

    def to_json(self) -> dict[str, Any]:
        """One flat document: the heartbeat and lag facts inline, the failure document, class and label."""
        document = asdict(self)
        document.update(document.pop("heartbeat"))
        del document["lag"]
        document.update(self.lag.to_json())
        document.update(failure=self.failure.to_json() if self.failure else None, failure_class=self.failure_class,
                        label=self.label)
        return document

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> HealthVerdict:
        """Inverse of :meth:`to_json` (the class and label are derived again)."""
        own = {f.name: document[f.name] for f in fields(cls)
               if f.name not in ("heartbeat", "lag", "failure") and f.name in document}
        failure = document["failure"]
        return cls(**{**own, "overall": Overall(document["overall"])},
                   heartbeat=HeartbeatFacts.from_json(document), lag=LagFacts.from_json(document),
                   failure=FailureDocument.from_json(failure) if failure else None)

    def table(self) -> str:
        """The verdict as a table a person reads at a glance, one line per partition below."""
        beat, lag = self.heartbeat, self.lag
        limit = "" if self.progress_threshold_s is None else f" (limit {self.progress_threshold_s:g}s)"
        rates = (f"in {_rate(beat.input_rows_per_second)}/s, processed {_rate(beat.processed_rows_per_second)}/s, "
                 f"batch {'-' if beat.batch_duration_ms is None else f'{beat.batch_duration_ms:,}'} ms, trigger "
                 f"{'-' if beat.trigger_interval_s is None else f'{beat.trigger_interval_s:g}'}s")
        rows: list[tuple[str, object]] = [
            ("verdict", self.label), ("reasons", "; ".join(self.reasons) or "-"),
            ("alive", f"{self.alive} (pid {self.pid}, {self.process_state})" if self.alive else False),
            ("progressing", self.progressing),
            ("heartbeat", f"{beat.heartbeat_event}, {beat.heartbeat_age_s:,.0f}s old{limit}"
                          if beat.heartbeat_event and beat.heartbeat_age_s is not None else None),
            ("last batch", f"{beat.last_batch_id} at {beat.last_progress_at}" if beat.last_progress_at else None),
            # a stopped stream keeps up with nothing: its last heartbeat's figures are history, said so
            ("keeping up", f"{self.keeping_up} ({rates})" if self.alive else
             f"not running (last heartbeat: {rates})" if beat.heartbeat_event else "not running"),
            ("lag", lag.describe()),
            ("retention risk", lag.retention_at_risk),
            ("broker", "; ".join(filter(None, [lag.broker_error, *lag.broker_notes])) or "ok"),
            ("standby", "none" if self.standby_pid is None else f"pid {self.standby_pid}, waiting for the lease"),
        ]
        width = max(len(name) for name, _ in rows)
        lines = [f"{name:<{width}} | {'-' if value is None else value}" for name, value in rows]
        if lag.partitions:
            high = "high (>=)" if lag.lower_bound else "high"
            lines.append(f"{'topic[partition]':<32} {'committed':>12} {high:>12} {'lag':>10} status  oldest(s)")
            lines.extend(
                f"{p.topic + f'[{p.partition}]':<32} {p.committed if p.committed is not None else '-':>12} "
                f"{p.high_watermark:>12} {p.lag:>10} {p.status.value:<6}  "
                f"{'-' if p.oldest_unprocessed_age_s is None else round(p.oldest_unprocessed_age_s, 1)}"
                f"{' AT RISK' if p.retention_at_risk else ''}"
                for p in lag.partitions)
        return "\n".join(lines)


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


@dataclass(frozen=True)
class BatchSeen:
    """The batch id the lease holder was last seen at, and since when (epoch seconds)."""

    pid: int
    batch_id: int | None
    since: float


@dataclass(frozen=True)
class HealthState:
    """History kept between checks: lag windows, and since when the last batch id has been seen."""

    lag: dict[str, list[list[float | int]]] = field(default_factory=dict)
    batch: BatchSeen | None = None

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> HealthState:
        batch = document.get("batch")
        return cls(document.get("lag", {}), BatchSeen(**batch) if batch else None)


@dataclass(frozen=True)
class Assessment:
    """A verdict and the history to keep if the verdict is acted upon (:meth:`commit`)."""

    verdict: HealthVerdict
    state: HealthState
    state_path: Path

    def commit(self) -> None:
        write_json_atomic(self.state_path, asdict(self.state))


def assess(settings: Settings, warden: WardenSettings, now: float | None = None) -> Assessment:
    """Look at the stream's files and the broker and judge; nothing is written until ``commit()``."""
    now = time.time() if now is None else now
    path = settings.run_paths.health
    state = HealthState.from_json(read_json(path) or {})
    checked_at = datetime.fromtimestamp(now, UTC).isoformat()
    holder = running_holder(settings)
    heartbeat = read_heartbeat(settings.run_paths.heartbeat)
    committed = committed_offsets(settings.checkpoint_location) or {}
    broker = observe_broker(settings, committed, warden.broker_timeout, now, best_effort=True)
    start = datetime.fromisoformat(holder.started_at).timestamp() if holder is not None else 0.0
    partitions, lag_windows = _judge_lag(settings, committed, broker, state, warden=warden, now=now, start=start)
    lag = LagFacts.of(partitions, broker)
    state = replace(state, lag=lag_windows)
    standby = running_standby(settings)
    standby_pid = None if standby is None else standby.pid
    if holder is None:
        verdict = _not_running(settings, warden, now, checked_at, heartbeat=heartbeat, lag=lag)
        return Assessment(replace(verdict, standby_pid=standby_pid), state, path)
    verdict, batch = _running(settings, warden, now, checked_at, holder=holder, heartbeat=heartbeat,
                            batch=state.batch, lag=lag)
    return Assessment(replace(verdict, standby_pid=standby_pid), replace(state, batch=batch), path)


def _not_running(settings: Settings, warden: WardenSettings, now: float, checked_at: str, *,
                 heartbeat: Heartbeat | None, lag: LagFacts) -> HealthVerdict:
    facts = HeartbeatFacts.of(heartbeat, now)
    # the limit the last heartbeat was held to, so that the table shows it as a number, not as "None"
    threshold = None if heartbeat is None else progress_limit(heartbeat, settings.trigger_interval, warden).seconds
    launch = starting_launch(settings, now, warden.startup_grace)
    if launch is not None:
        return HealthVerdict(Overall.STARTING, [f"launched at {launch.launched_at}, no lease yet"], checked_at,
                             progress_threshold_s=warden.startup_grace, heartbeat=facts, lag=lag)
    failure = read_failure(settings.run_paths.failure)
    if failure is not None:
        reason = f"exited with {failure.failure_class.value} (exit {failure.exit_code}): {failure.message}"
        return HealthVerdict(Overall.FAILED, [reason], checked_at, progress_threshold_s=threshold, heartbeat=facts,
                             lag=lag, failure=failure)
    return HealthVerdict(Overall.DEAD, ["no live process holds the checkpoint lease"], checked_at,
                         progress_threshold_s=threshold, heartbeat=facts, lag=lag)


def _running(settings: Settings, warden: WardenSettings, now: float, checked_at: str, *, holder: LeaseHolder,
             heartbeat: Heartbeat | None, batch: BatchSeen | None,
             lag: LagFacts) -> tuple[HealthVerdict, BatchSeen | None]:
    process_state = _process_state(holder)
    running = HealthVerdict(Overall.HEALTHY, [], checked_at, alive=True, pid=holder.pid,
                            process_state=process_state, progress_threshold_s=warden.startup_grace, lag=lag)
    if heartbeat is None or heartbeat.pid != holder.pid:
        started = datetime.fromisoformat(holder.started_at).timestamp()
        if now - started <= warden.startup_grace:
            return replace(running, overall=Overall.STARTING,
                           reasons=[f"lease taken at {holder.started_at}, no heartbeat yet"]), None
        return replace(running, overall=Overall.HUNG,
                       reasons=[f"no heartbeat {now - started:.0f}s after the lease was taken "
                                f"(grace {warden.startup_grace:g}s)"]), None
    trigger = heartbeat.trigger_interval_s or settings.trigger_interval
    limit = progress_limit(heartbeat, settings.trigger_interval, warden)
    threshold = limit.seconds
    running = replace(running, progress_threshold_s=threshold)

    if batch is None or batch.pid != holder.pid or batch.batch_id != heartbeat.batch_id:
        batch = BatchSeen(holder.pid, heartbeat.batch_id, now)
    reasons: list[str] = []
    age = heartbeat.age_seconds(datetime.fromtimestamp(now, UTC))
    stuck_for = now - batch.since
    stale = age > threshold
    stuck = lag.total_lag > 0 and stuck_for > threshold
    if stale:
        reasons.append(f"heartbeat is {age:.0f}s old (limit {limit.describe()})")
    if stuck:
        reasons.append(f"batch {heartbeat.batch_id} unchanged for {stuck_for:.0f}s while "
                       f"{lag.total_lag} records wait")
    if process_state == psutil.STATUS_STOPPED and (stale or stuck):  # evidence of the hang; before it: shown only
        reasons.append("the lease holder process is stopped (SIGSTOP)")
    progressing = not (stale or stuck)
    keeping_up = _keeping_up(heartbeat, lag, trigger, warden, reasons)
    if lag.lag_status not in (LagStatus.OK, LagStatus.STARTING, LagStatus.UNKNOWN):  # UNKNOWN: the broker's reason
        reasons.append(f"lag {lag.lag_status.value} (Burrow)")
    if lag.retention_at_risk:
        reasons.append("unprocessed records near the end of their retention")
    if lag.broker_error:
        reasons.append(f"broker: {lag.broker_error}")
    overall = Overall.HUNG if not progressing else Overall.DEGRADED if reasons else Overall.HEALTHY
    verdict = replace(running, overall=overall, reasons=reasons, progressing=progressing, keeping_up=keeping_up,
                      heartbeat=HeartbeatFacts.of(heartbeat, now))
    return verdict, batch


def _keeping_up(heartbeat: Heartbeat, lag: LagFacts, trigger: float, warden: WardenSettings,
                reasons: list[str]) -> bool:
    """Judged only while records wait, and after the process's first batch (it warms up Python workers, state
    and the source: its duration and rates say nothing about keeping up).

    One batch's rates are noisy (a pause, a burst arriving mid-batch): a processing rate below the input's counts
    only once the oldest waiting record is older than ``batch_overrun`` triggers, which a stream keeping up
    never lets happen (when that age is unknown, the rates alone decide)."""
    if lag.total_lag == 0 or heartbeat.batch_duration_ms is None or heartbeat.process_batches < 2:
        return True
    ages = [p.oldest_unprocessed_age_s for p in lag.partitions if p.oldest_unprocessed_age_s is not None]
    backlog = not ages or max(ages) > warden.batch_overrun * trigger
    slow_rate = backlog and \
        heartbeat.processed_rows_per_second < warden.keepup_ratio * heartbeat.input_rows_per_second
    slow_batch = heartbeat.batch_duration_ms > warden.batch_overrun * trigger * 1000
    if slow_rate:
        reasons.append(f"processing {heartbeat.processed_rows_per_second:.0f} rows/s < "
                       f"{warden.keepup_ratio:g} x input {heartbeat.input_rows_per_second:.0f} rows/s")
    if slow_batch:
        reasons.append(f"batch took {heartbeat.batch_duration_ms} ms > {warden.batch_overrun:g} x trigger")
    return not (slow_rate or slow_batch)


def _process_state(holder: LeaseHolder) -> str | None:
    try:
        return str(psutil.Process(holder.pid).status())
    except psutil.NoSuchProcess:
        return None  # another host, or gone since the lease was read


def _judge_lag(settings: Settings, committed: OffsetDoc, broker: BrokerView, state: HealthState, *,
               warden: WardenSettings, now: float, start: float
               ) -> tuple[list[PartitionHealth], dict[str, list[list[float | int]]]]:
    """Lag per partition judged over the checks of the current ``start`` (0: nothing runs); ``STARTING`` while
    records wait and the process running since ``start`` has committed nothing yet (no window kept then)."""
    commits = commit_batches(settings.checkpoint_location)
    committed_at = (settings.checkpoint_location / "commits" / str(commits[-1])).stat().st_mtime if commits \
        else now
    first_batch_pending = start > 0 and (not commits or committed_at < start)
    windows: dict[str, list[list[float | int]]] = {}
    found = []
    for tp, (low, high) in sorted(broker.watermarks.items()):
        key = f"{tp.topic}:{tp.partition}"
        position = committed.get(tp.topic, {}).get(str(tp.partition))
        observation = LagObservation(now, low if position is None else position, high, committed_at, start)
        if first_batch_pending:
            windows[key] = []
            status = LagStatus.STARTING if observation.lag > 0 else LagStatus.OK
        else:
            window = slide([LagObservation.from_json(r) for r in state.lag.get(key, [])], observation,
                           warden.lag_window)
            windows[key] = [o.to_json() for o in window]
            status = evaluate(window, now, warden.lag_window)
        retention = broker.retention_ms.get(tp.topic)
        age = broker.oldest_unprocessed_age_s.get(tp)
        at_risk = retention is not None and retention > 0 and age is not None and \
            age * 1000 >= warden.retention_risk * retention
        found.append(PartitionHealth(tp.topic, tp.partition, position, high, observation.lag,
                                     status, age, retention, at_risk))
    return found, windows
