"""The blast radius of a recovery, before anything changes: what is undone, replayed and lost for good.

1. **target versions**: each table's version to restore (the last validated ones, the given ones, or the
   newest committed by a time); none for an ``offsets`` target, which leaves the tables as they are;
2. **undone**: per table, the versions and rows (net, from the log's row counts) between the target and the
   newest version, and the offsets it will no longer claim (:func:`~streamwarden.tables.restore.undone_offsets`);
3. **resume**: per topic-partition on the broker, the offset the new checkpoint starts from: the end of what
   every table claims at the target (the smallest over the tables: each skips what it already holds), the
   given offset, or the log start for a partition no table holds; in the ``sessions`` pipeline no later than
   the clean start (snapshot) of the oldest session still open there, since a new checkpoint has no session
   state: the stream reads those records again to rebuild it, and the sink drops the rows the tables hold;
4. **replayed and lost**: from the broker's watermarks, the offsets replayed (resume to log end) and those
   lost for good: below the log start (Kafka deleted them), or skipped forward by an ``offsets`` target; and
   the open sessions whose clean start Kafka no longer holds (they cannot be rebuilt: their next records go
   to quarantine until the site restarts them, see ``restart_sessions``);
5. **time**: the replay at the stream's measured rate: its last heartbeat's, else (the stream stopped, or a
   restart died before its first batch) the last rate the first table's Delta history shows (its stream
   commits name their offset ranges and times), said which; unknown only when neither has one.

A version that does not exist, and an offset beyond a partition's log end, are refused (CONFIG) by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
from deltalake import DeltaTable

from streamwarden.failures import ConfigError
from streamwarden.kafka.admin import TopicPartitionId, fetch_high_watermarks, list_partitions, metadata_consumer
from streamwarden.recovery.request import RecoveryRequest, Target
from streamwarden.runfiles.heartbeat import read_heartbeat
from streamwarden.session_restarts.sessions import CLEAN_BOUNDARY
from streamwarden.settings import Settings
from streamwarden.tables.commit_rate import history_rate
from streamwarden.tables.committed import Runs, TopicPartition
from streamwarden.tables.location import SESSION_ROWS, TableLocation, pipeline_tables
from streamwarden.tables.ranges import IntervalIndex, index_from_json, index_to_json
from streamwarden.tables.reading import read
from streamwarden.tables.restore import ClaimedVersion, undone_offsets
from streamwarden.tables.sql import bounded_connection
from streamwarden.validation.report import last_validated
from streamwarden.validation.snapshot import pin

RATE_HISTORY = 500
"""Commits of the Delta history searched for the stream's last rate (maintenance's commits come between)."""


@dataclass(frozen=True)
class TableUndo:
    """One table's part: from its newest version back to the target."""

    table: str
    newest: int
    target: int
    rows_now: int
    rows_target: int
    undone: IntervalIndex

    @property
    def rows_undone(self) -> int:
        return self.rows_now - self.rows_target

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table, "newest": self.newest, "target": self.target, "rows_now": self.rows_now,
                "rows_target": self.rows_target,
                "undone": index_to_json(self.undone)}


@dataclass(frozen=True)
class PartitionResume:
    """One topic-partition's part: where the new checkpoint starts, what Kafka holds, what is lost."""

    topic: str
    partition: int
    resume: int  # the first offset the new checkpoint reads
    log_start: int
    log_end: int
    lost: int  # offsets gone for good: below the log start, or skipped forward
    held: int | None = None  # the end of what the tables hold (None: nothing); replay before it rebuilds state
    sessions_lost: int = 0  # open sessions whose clean start is below the log start

    @property
    def replayed(self) -> int:
        return max(0, self.log_end - max(self.resume, self.log_start))


@dataclass(frozen=True)
class RecoveryPlan:
    """What a recovery will do, as shown before the approval (and re-checked after the stream stopped)."""

    recovery_id: str
    created_at: datetime
    request: RecoveryRequest
    tables: tuple[TableUndo, ...]
    partitions: tuple[PartitionResume, ...]
    rate: float | None  # records per second the replay is estimated at
    rate_source: str  # where the rate comes from, and when it was measured

    @property
    def replayed(self) -> int:
        return sum(p.replayed for p in self.partitions)

    @property
    def lost(self) -> int:
        return sum(p.lost for p in self.partitions)

    @property
    def sessions_lost(self) -> int:
        return sum(p.sessions_lost for p in self.partitions)

    def table_targets(self) -> dict[str, int]:
        """Each restored table's target version."""
        return {t.table: t.target for t in self.tables}

    @property
    def estimated_s(self) -> float | None:
        return None if not self.rate else self.replayed / self.rate

    def resume_offsets(self) -> dict[str, dict[str, int]]:
        """The new checkpoint's starting offsets, as the source's offset document holds them."""
        offsets: dict[str, dict[str, int]] = {}
        for p in self.partitions:
            offsets.setdefault(p.topic, {})[str(p.partition)] = max(p.resume, p.log_start)
        return offsets

    def text(self) -> str:
        """The plan as Markdown tables, for the task log and the approval request."""
        lines = [f"**Recovery {self.recovery_id}** to {self.request.describe()}"
                 f"{f' ({self.request.reason})' if self.request.reason else ''}", "",
                 "| table | newest | restore to | versions undone | rows undone |",
                 "| --- | ---: | ---: | ---: | ---: |"]
        lines += [f"| {t.table} | {t.newest} | {t.target} | {t.newest - t.target} | {t.rows_undone:,} |"
                  for t in self.tables] or ["| (tables left as they are) | | | | |"]
        lines += ["", "| topic | partition | resume at | tables hold to | log start | log end | replayed | "
                      "lost for good | sessions not rebuilt |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        lines += [f"| {p.topic} | {p.partition} | {p.resume:,} | {'-' if p.held is None else f'{p.held:,}'} | "
                  f"{p.log_start:,} | {p.log_end:,} | {p.replayed:,} | {p.lost:,} | {p.sessions_lost:,} |"
                  for p in self.partitions]
        estimate = f"time unknown ({self.rate_source})" if self.estimated_s is None else (
            f"about {self.estimated_s:,.0f} s at {self.rate_source}")
        lines += ["", f"{self.replayed:,} records replayed, {estimate}; "
                      f"**{self.lost:,} records lost for good**"
                      + (f"; **{self.sessions_lost:,} open sessions cannot be rebuilt** (their clean start is no "
                         "longer in Kafka: restart them with restart_sessions)" if self.sessions_lost else "")
                      + "."]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {"recovery_id": self.recovery_id, "created_at": self.created_at.isoformat(),
                "request": self.request.to_json(), "tables": [t.to_json() for t in self.tables],
                "partitions": [asdict(p) for p in self.partitions], "rate": self.rate,
                "rate_source": self.rate_source, "replayed": self.replayed, "lost": self.lost,
                "sessions_lost": self.sessions_lost, "estimated_s": self.estimated_s}

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> RecoveryPlan:
        tables = tuple(TableUndo(t["table"], t["newest"], t["target"], t["rows_now"], t["rows_target"],
                                 index_from_json(t["undone"])) for t in document["tables"])
        return cls(document["recovery_id"], datetime.fromisoformat(document["created_at"]),
                   RecoveryRequest.from_json(document["request"]), tables,
                   tuple(PartitionResume(**p) for p in document["partitions"]), document["rate"],
                   document["rate_source"])


def target_versions(settings: Settings, request: RecoveryRequest) -> dict[str, int]:
    """Step 1: each table's version to restore (none for an ``offsets`` target)."""
    names = pipeline_tables(settings)
    if request.target is Target.OFFSETS:
        return {}
    if request.target is Target.LAST_VALIDATED:
        document = last_validated(settings.run_paths.validation) or {"tables": {}}
        versions = {name: int(entry["version"]) for name, entry in document["tables"].items() if name in names}
        missing = [name for name in names if name not in versions and TableLocation.of(settings, name).exists()]
        if missing:
            raise ConfigError(f"no validated version of {', '.join(missing)} yet (no validate_output run passed); "
                              "give target versions or as_of instead")
        return versions
    if request.target is Target.VERSIONS:
        _refuse_missing(settings, request.versions)
    pinned = pin(settings, names, request.versions or None, request.as_of)
    return {table.name: table.version for table in pinned}


def _refuse_missing(settings: Settings, versions: Mapping[str, int]) -> None:
    """CONFIG naming each table that does not exist, or whose given version it does not have (yet)."""
    problems = []
    for name, version in sorted(versions.items()):
        location = TableLocation.of(settings, name)
        if not location.exists():
            problems.append(f"Param versions: table {name} does not exist (yet) at {location.uri}")
            continue
        with location.reaching():
            newest = location.open().version()
        if version > newest:
            problems.append(f"Param versions: {name} has no version {version}: its newest is {newest}")
    if problems:
        raise ConfigError("; ".join(problems), details={"versions": dict(versions)})


def _rows(table: DeltaTable) -> int:
    actions = pa.table(table.get_add_actions(flatten=False))
    return int(sum(n or 0 for n in actions.column("num_records").to_pylist()))


def _runs(settings: Settings, versions: Mapping[str, int | None], partitions: list[TopicPartition]
          ) -> dict[str, Runs]:
    """Each table's runs of ``partitions`` at its given version (None: the newest)."""
    runs = {}
    for name, version in versions.items():
        location = TableLocation.of(settings, name)
        with location.reaching():
            runs[name] = ClaimedVersion.read(location, partitions, version).claims
    return runs


def undo(settings: Settings, versions: Mapping[str, int], now: Mapping[str, Runs], then: Mapping[str, Runs]
         ) -> list[TableUndo]:
    """Step 2: per table, the versions, rows and offsets between its newest version and the target (``now``
    and ``then``: its runs at both)."""
    undone = []
    for name, version in sorted(versions.items()):
        location = TableLocation.of(settings, name)
        with location.reaching():
            newest = location.open()
            undone.append(TableUndo(name, newest.version(), version, _rows(newest), _rows(location.open(version)),
                                    undone_offsets(now[name], then[name])))
    return undone


def make_plan(settings: Settings, request: RecoveryRequest, *, recovery_id: str, now: datetime,
              timeout: float = 10.0) -> RecoveryPlan:
    """Steps 1-5: the plan of ``request`` against the tables and the broker as they are now."""
    versions = target_versions(settings, request)
    consumer = metadata_consumer(settings.kafka_client_config())
    try:
        on_broker = list_partitions(consumer, settings.topic_pattern, timeout)
        marks = fetch_high_watermarks(consumer, on_broker, timeout)
    finally:
        consumer.close()
    partitions = [(tp.topic, tp.partition) for tp in on_broker]
    _refuse_unknown(request, set(partitions))
    newest: dict[str, int | None] = {name: None for name in pipeline_tables(settings)
                                     if TableLocation.of(settings, name).exists()}
    runs_now, runs_then = _runs(settings, newest, partitions), _runs(settings, versions, partitions)
    tables = undo(settings, versions, runs_now, runs_then)
    now_claims = {name: runs.index() for name, runs in runs_now.items()}
    claims = {name: runs.index() for name, runs in runs_then.items()}
    rebuild = _rebuild_starts(settings, versions, now) if settings.pipeline == "sessions" else {}
    resumes = []
    for topic, partition in partitions:
        low, high = marks[TopicPartitionId(topic, partition)]
        held_now = _claim_end(now_claims, topic, partition)
        if request.target is Target.OFFSETS:
            held = held_now
            resume = request.offsets.get(topic, {}).get(partition, held if held is not None else low)
            if resume > high:
                raise ConfigError(f"Param offsets: {topic}[{partition}]@{resume} is past the partition's log end "
                                  f"{high}")
            lost = max(0, resume - max(low, held or 0)) + max(0, low - resume)
        else:
            held = _claim_end(claims, topic, partition)
            resume = held if held is not None else low
            lost = max(0, low - resume)
        starts = [start for start in rebuild.get((topic, partition), []) if start < resume]
        resume = min([resume, *[max(start, low) for start in starts]])
        resumes.append(PartitionResume(topic, partition, resume, low, high, lost, held,
                                       sum(1 for start in starts if start < low)))
    rate, source = _rate(settings)
    return RecoveryPlan(recovery_id, now, request, tuple(tables), tuple(resumes), rate, source)


def _rebuild_starts(settings: Settings, versions: Mapping[str, int], now: datetime
                    ) -> dict[TopicPartition, list[int]]:
    """Per topic-partition, the clean start offset of each session open in ``session_rows`` at its target
    version (the newest for an ``offsets`` target): its last start, snapshot or resync, not ended since, with
    an event within the session timeout of ``now``."""
    location = TableLocation.of(settings, SESSION_ROWS)
    if not location.exists():
        return {}
    rows = read(settings, SESSION_ROWS, versions.get(SESSION_ROWS))
    cutoff = int((now.timestamp() - settings.session_timeout) * 1e6)
    with bounded_connection(settings.run_paths.spill) as con:
        con.register("rebuild_rows", rows)
        found = con.execute(f"""
            SELECT topic, "partition", max("offset") FILTER (WHERE {CLEAN_BOUNDARY}) AS clean,
                   arg_max(boundary, "offset") FILTER (WHERE boundary IS NOT NULL) AS last_boundary,
                   epoch_us(max(event_ts)) AS last_seen
            FROM rebuild_rows GROUP BY topic, "partition", session_id""").fetchall()
    starts: dict[TopicPartition, list[int]] = {}
    for topic, partition, clean, last_boundary, last_seen in found:
        if clean is not None and last_boundary != "end" and (last_seen or 0) >= cutoff:
            starts.setdefault((topic, int(partition)), []).append(int(clean))
    return starts


def _claim_end(claims: Mapping[str, IntervalIndex], topic: str, partition: int) -> int | None:
    """The smallest over the tables of the end of what each claims of the partition (None: no table does)."""
    ends = [intervals[-1][1] for index in claims.values() if (intervals := index.get(topic, {}).get(partition))]
    return min(ends) if ends else None


def _refuse_unknown(request: RecoveryRequest, known: set[TopicPartition]) -> None:
    unknown = sorted((t, p) for t, parts in request.offsets.items() for p in parts if (t, p) not in known)
    if unknown:
        raise ConfigError("Param offsets: no partition " + ", ".join(f"{t}[{p}]" for t, p in unknown)
                          + " on the broker", details={"unknown": [list(tp) for tp in unknown]})


def _rate(settings: Settings) -> tuple[float | None, str]:
    """The replay's rate: the heartbeat's processed rate, else the last rate the Delta history measured (a
    stream that stopped, or restarted and died before its first batch, leaves a heartbeat without one)."""
    beat = read_heartbeat(settings.run_paths.heartbeat)
    if beat is not None and beat.processed_rows_per_second > 0:
        return beat.processed_rows_per_second, (f"the stream's last measured rate "
                                                f"({beat.processed_rows_per_second:,.0f} records/s, batch "
                                                f"{beat.batch_id} at {beat.written_at})")
    name = pipeline_tables(settings)[0]
    location = TableLocation.of(settings, name)
    with location.reaching():
        table = location.open_or_none()
        measured = None if table is None else history_rate(table.history(limit=RATE_HISTORY))
    missing = "the heartbeat has none" if beat is None else f"the heartbeat ({beat.event}) has none"
    if measured is not None:
        return measured.records_per_second, (f"the stream's last measured rate, from {name}'s Delta history "
                                             f"({measured.describe()}; {missing})")
    return None, (f"no measured rate: {missing}, and {name}'s Delta history holds no two stream commits "
                  "close together")
