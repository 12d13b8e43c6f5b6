"""Check 4: per hour, the offsets Kafka holds against the offsets the tables account for (Chaperone-style).

Kafka side: for each topic-partition, the first offset at or after each hour boundary of the audited hours
(``offsets_for_times``), so hour ``h`` holds offsets ``[first(h), first(h + 1))``. Only what the stream has
read counts (below its position), from what Kafka still holds (its log start) or the first offset the tables
claim, whichever is later. Tables side: the distinct
offsets of both tables in each hour's offsets, counted in DuckDB (the ``accounted`` table of
:mod:`.coverage`, on the same connection).

An hour whose counts differ is AUDIT_MISMATCH. Unlike check 1, this does not start from what the logs claim:
offsets the stream skipped without claiming them (a restart at ``latest``, explicit starting offsets past
unread data) show here while Kafka retains them. Counts are offsets: on a compacted topic, or one with
transaction markers, Kafka's offsets outnumber its records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import pairwise

import duckdb
import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
from confluent_kafka import KafkaException, TopicPartition

from streamwarden.failures import StreamwardenError
from streamwarden.kafka.admin import metadata_consumer
from streamwarden.settings import Settings
from streamwarden.tables.committed import TopicPartition as TopicPartitionKey
from streamwarden.validation.findings import Finding, FindingClass, Outcome

HOUR = 3600


@dataclass(frozen=True)
class HourCount:
    """One topic-partition and hour: the offsets Kafka holds that the stream has read, and the tables' count."""

    topic: str
    partition: int
    hour: str  # ISO time of the hour's start (UTC)
    first: int
    end: int  # the hour's offsets [first, end), cut to the log start and the stream's position
    kafka: int
    tables: int


Audit = Outcome[HourCount]
"""Check 4's outcome: the hours compared, the findings, or why Kafka could not answer."""


Boundaries = Mapping[TopicPartitionKey, Sequence[tuple[int, int]]]
"""Per topic-partition: (hour start in epoch seconds, first offset at or after it), oldest first, ending with
the current hour's end and the log end."""


def hour_boundaries(settings: Settings, partitions: Mapping[TopicPartitionKey, int], hours: int, timeout: float,
                    now: float) -> Boundaries:
    """The first offset at or after each of the last ``hours`` hour boundaries, per topic-partition
    (``partitions``: the log end of each, used where no record is that recent)."""
    current = int(now) // HOUR * HOUR
    starts = [current - HOUR * k for k in range(hours - 1, -1, -1)]
    consumer = metadata_consumer({**settings.kafka_client_config(), "socket.timeout.ms": str(int(timeout * 1000))})
    found: dict[TopicPartitionKey, list[tuple[int, int]]] = {tp: [] for tp in partitions}
    try:
        for start in starts:
            asked = [TopicPartition(t, p, start * 1000) for t, p in sorted(partitions)]
            for answer in consumer.offsets_for_times(asked, timeout=timeout):
                tp = (str(answer.topic), int(answer.partition))
                if answer.error is not None:
                    raise KafkaException(answer.error)
                found[tp].append((start, partitions[tp] if answer.offset < 0 else int(answer.offset)))
    finally:
        consumer.close()
    return {tp: [*bounds, (current + HOUR, partitions[tp])] for tp, bounds in found.items()}


def ask_kafka(settings: Settings, partitions: Mapping[TopicPartitionKey, int], hours: int, timeout: float,
              now: float) -> Boundaries | str:
    """:func:`hour_boundaries`, or why the broker could not answer."""
    try:
        return hour_boundaries(settings, partitions, hours, timeout, now)
    except (KafkaException, StreamwardenError) as exc:
        return str(exc).split(" [streamwarden:")[0]


def audit(con: duckdb.DuckDBPyConnection, boundaries: Boundaries,
          windows: Mapping[TopicPartitionKey, tuple[int, int]]) -> Audit:
    """Check 4 over the ``accounted`` table of ``con`` (:func:`~.coverage.check_coverage` filled it), for the
    offsets ``[from, to)`` of each topic-partition's window: from the later of Kafka's log start and the
    first offset the tables claim (a stream started at ``latest`` skipped what came before on purpose), to
    the stream's position."""
    rows = []
    for (topic, partition), bounds in sorted(boundaries.items()):
        if (topic, partition) not in windows:
            continue
        low, read = windows[(topic, partition)]
        for (start, first), (_, following) in pairwise(bounds):
            lo, hi = max(first, low), min(following, read)
            if hi > lo:
                rows.append((topic, partition, start, lo, hi))
    if not rows:
        return Audit()
    columns = list(zip(*rows, strict=True))
    con.register("hours_arrow", pa.table({"topic": pa.array(columns[0], pa.string()),
                                          "partition": pa.array(columns[1], pa.int64()),
                                          "hour": pa.array(columns[2], pa.int64()),
                                          "lo": pa.array(columns[3], pa.int64()),
                                          "hi": pa.array(columns[4], pa.int64())}))
    counted = con.execute("""
        WITH present AS (SELECT DISTINCT topic, "partition", "offset" FROM accounted)
        SELECT h.topic, h."partition", h.hour, h.lo, h.hi, count(p."offset") AS tables
        FROM hours_arrow h LEFT JOIN present p ON p.topic = h.topic AND p."partition" = h."partition"
                                              AND p."offset" >= h.lo AND p."offset" < h.hi
        GROUP BY ALL ORDER BY ALL""").fetchall()
    hours = tuple(HourCount(str(t), int(p), datetime.fromtimestamp(int(h), UTC).isoformat(), int(lo), int(hi),
                            int(hi) - int(lo), int(n)) for t, p, h, lo, hi, n in counted)
    findings = tuple(Finding(FindingClass.AUDIT_MISMATCH, None, h.topic, h.partition, ((h.first, h.end),),
                             abs(h.kafka - h.tables),
                             f"hour {h.hour}: Kafka holds {h.kafka:,} offsets the stream has passed, the tables "
                             f"account for {h.tables:,}") for h in hours if h.kafka != h.tables)
    return Audit(hours, findings)
