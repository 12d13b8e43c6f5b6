"""Check 3: the tables against Kafka: offsets that expired unread, lag, and time left before unread data expires.

Per topic-partition matching the stream's pattern, from the broker (:mod:`streamwarden.warden.broker_view`):
the log start and end, ``retention.ms`` and the age of the oldest unread record. The stream's position is the
checkpoint's committed offset (without a checkpoint: the lowest newest offset of the tables).

* ``position < log start``: Kafka deleted ``[position, log start)`` before the stream read it (DATA_EXPIRED).
* ``log end < a table's newest offset``: the log no longer reaches offsets the tables hold (topic deleted and
  recreated, or truncated: DATA_EXPIRED too, the table's offsets no longer name Kafka's records).
* unread data and no table commit for ``stale_after`` (STALE); unread data that expires before the stream,
  at the rate it advanced over its recent commits, has read it (STALE, with the time left).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from streamwarden.kafka.admin import TopicPartitionId
from streamwarden.settings import Settings
from streamwarden.tables.committed import TopicPartition
from streamwarden.validation.findings import Finding, FindingClass, Outcome
from streamwarden.validation.snapshot import PinnedTable
from streamwarden.warden.broker_view import BrokerView, observe_broker

RATE_COMMITS = 20
"""The rate of progress is measured over this many of a table's newest commits."""


@dataclass(frozen=True)
class PartitionUpstream:
    """One topic-partition as Kafka holds it, and how far the stream has read it."""

    topic: str
    partition: int
    log_start: int
    log_end: int
    position: int
    expired: int  # offsets deleted before they were read
    lag: int
    retention_s: float | None
    oldest_unread_age_s: float | None
    rate_per_s: float | None  # offsets per second the tables advanced over their recent commits
    expires_in_s: float | None  # when the oldest unread record expires (None: nothing unread, or unknown)


Upstream = Outcome[PartitionUpstream]
"""Check 3's outcome: the partitions as Kafka holds them, the findings, or why the broker could not answer."""


def check_upstream(settings: Settings, tables: Sequence[PinnedTable], committed: dict[TopicPartition, int] | None,
                   *, timeout: float, stale_after: float, now: float | None = None) -> Upstream:
    """Check 3 (``committed``: the checkpoint's committed position, None without a checkpoint)."""
    now = time.time() if now is None else now
    ends = _table_ends(tables)
    positions = committed if committed is not None else {tp: min(e) for tp, e in ends.items()}
    document: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in positions.items():
        document.setdefault(topic, {})[str(partition)] = offset
    view = observe_broker(settings, document, timeout, now)
    if view.error is not None:
        return Upstream(error=view.error)
    last_commit = max((t.committed_at for t in tables if t.committed_at is not None), default=None)
    rates = _rates(tables)
    rows: list[PartitionUpstream] = []
    findings: list[Finding] = []
    for tp_id, (low, high) in sorted(view.watermarks.items()):
        tp = (tp_id.topic, tp_id.partition)
        row = _row(view, tp_id, (low, high), positions.get(tp, low), rates.get(tp))
        rows.append(row)
        findings += _findings(row, ends.get(tp, []), last_commit, now, stale_after)
    return Upstream(tuple(rows), tuple(findings))


def annotate(findings: Sequence[Finding], partitions: Sequence[PartitionUpstream]) -> list[Finding]:
    """Offsets missing from the tables (GAP, AUDIT_MISMATCH, CHECKPOINT_MISMATCH) told whether Kafka still holds
    them (they can be read again) or not any more."""
    kafka = {(p.topic, p.partition): p for p in partitions}
    told = []
    for finding in findings:
        upstream = kafka.get((finding.topic, finding.partition))
        missing = finding.finding_class in (FindingClass.GAP, FindingClass.AUDIT_MISMATCH,
                                            FindingClass.CHECKPOINT_MISMATCH)
        if upstream is None or not missing or not finding.ranges:
            told.append(finding)
            continue
        first = finding.ranges[0][0]
        note = (f"Kafka still holds them (its log starts at {upstream.log_start:,}): they can be read again"
                if first >= upstream.log_start else
                f"Kafka's log starts at {upstream.log_start:,}: offsets below it are gone from Kafka too")
        told.append(replace(finding, detail=f"{finding.detail}; {note}"))
    return told


def _row(view: BrokerView, tp: TopicPartitionId, marks: tuple[int, int], position: int, rate: float | None
         ) -> PartitionUpstream:
    low, high = marks
    retention_ms = view.retention_ms.get(tp.topic)
    retention = None if retention_ms is None or retention_ms < 0 else retention_ms / 1000.0
    age = view.oldest_unprocessed_age_s.get(tp)
    lag = max(0, high - max(position, low))
    expires = None if retention is None or age is None or not lag else retention - age
    return PartitionUpstream(tp.topic, tp.partition, low, high, position, max(0, low - position), lag, retention,
                             age, rate, expires)


def _findings(row: PartitionUpstream, ends: list[int], last_commit: float | None, now: float,
              stale_after: float) -> list[Finding]:
    found = []
    if row.expired:
        found.append(Finding(FindingClass.DATA_EXPIRED, None, row.topic, row.partition,
                             ((row.position, row.log_start),), row.expired,
                             f"Kafka's log starts at {row.log_start}, the stream had read up to "
                             f"{row.position}: {row.expired:,} offsets expired before they were read"))
    if ends and max(ends) > row.log_end:
        found.append(Finding(FindingClass.DATA_EXPIRED, None, row.topic, row.partition, ((row.log_end, max(ends)),),
                             max(ends) - row.log_end, f"Kafka's log ends at {row.log_end}, below the offsets the "
                             f"tables hold (up to {max(ends)}): the topic was recreated or truncated"))
    if row.lag and last_commit is not None and now - last_commit > stale_after:
        found.append(Finding(FindingClass.STALE, None, row.topic, row.partition, ((row.position, row.log_end),),
                             row.lag, f"{row.lag:,} offsets unread and no table commit for {now - last_commit:,.0f} s"))
    elif row.expires_in_s is not None:
        catch_up = None if not row.rate_per_s else row.lag / row.rate_per_s
        # no progress measured (a partition quiet over the rate window): stale only when it expires soon
        too_late = row.expires_in_s <= stale_after if catch_up is None else catch_up > row.expires_in_s
        if too_late:
            pace = "no progress" if catch_up is None else f"{row.rate_per_s:,.1f} offsets/s needs {catch_up:,.0f} s"
            found.append(Finding(FindingClass.STALE, None, row.topic, row.partition, ((row.position, row.log_end),),
                                 row.lag, f"the oldest unread record expires in {row.expires_in_s:,.0f} s; at the "
                                 f"current rate ({pace}) the stream reads it too late"))
    return found


def _table_ends(tables: Sequence[PinnedTable]) -> dict[TopicPartition, list[int]]:
    """Per topic-partition the newest committed offset of each table that holds some (claims asked so far)."""
    ends: dict[TopicPartition, list[int]] = {}
    for table in tables:
        for tp, intervals in table.known_claims().items():
            if intervals:
                ends.setdefault(tp, []).append(intervals[-1][1])
    return ends


def _rates(tables: Sequence[PinnedTable]) -> dict[TopicPartition, float]:
    """Offsets per second each topic-partition advanced over the first table's last ``RATE_COMMITS`` commits."""
    if not tables or tables[0].version == 0:
        return {}
    table = tables[0]
    older = table.at(max(0, table.version - RATE_COMMITS))
    if table.committed_at is None or older.committed_at is None or older.committed_at >= table.committed_at:
        return {}
    seconds = table.committed_at - older.committed_at
    now, then = table.known_claims(), older.claims(table.known_claims())
    return {tp: (intervals[-1][1] - (then[tp][-1][1] if then.get(tp) else intervals[0][0])) / seconds
            for tp, intervals in now.items() if intervals}
