"""``pykafka``: a Spark streaming source for Kafka written as a PySpark Python Data Source.

Options mirror Spark's Kafka source so users recognise them:

==========================  ===========================================================================
``kafka.<librdkafka key>``  client settings (``kafka.bootstrap.servers``, ``kafka.security.protocol``,
                            ``kafka.sasl.*``, ``kafka.ssl.*``)
``subscribePattern``        regex of topics (full match); re-evaluated at every trigger: new topics and
                            partitions are read from their earliest offset, deleted ones are pruned
``startingOffsets``         ``earliest`` | ``latest`` | JSON ``{topic: {partition: offset}}`` (-2 earliest,
                            -1 latest); only for a new checkpoint
``failOnDataLoss``          ``true`` (default): expired/vanished offsets fail with DATA_LOSS
``maxOffsetsPerTrigger``    cap of records per micro-batch, spread fairly over partitions; the first batch
                            a reader plans reads at most :data:`FIRST_BATCH_RECORDS` whatever the cap
``highWatermarkSource``     ``fetch`` (default, right on every broker) | ``list_offsets`` (Apache Kafka)
``failOnTopicDeletion``     ``true``: a vanished topic is DATA_LOSS instead of a pruning warning
``stopMarkerPath``          when this file exists no new offsets are planned (graceful drain)
``initialOffsetsPath``      where the first planned offsets are persisted, so a replay of batch 0 after
                            a crash reads exactly the same range
``readTimeout``             seconds a reader waits for a planned record before ENVIRONMENT failure
``watermarkTimeout``        seconds a trigger waits for the broker's watermarks (default 4); partitions
                            whose fetch did not answer are planned up to ListOffsets' end, a lower bound
``brokerTimeout``           seconds the broker may leave the driver's queries unanswered before the
                            process fails with ENVIRONMENT (default 300); until then each trigger that
                            gets no answer plans nothing new and the next one asks again
``maxReadTasks``            at most this many Spark tasks read per micro-batch; the topic-partitions'
                            ranges are packed into them by record count (default 0: one task per
                            topic-partition, as Spark's Kafka source does)
``packSessionBuckets``      ``N`` > 0: instead of one row per record, one row per session bucket and task,
                            ``(session_bucket, records)``, the records as an Arrow IPC payload
                            (:mod:`streamwarden.stream.sessions.packing`); for the session job
``bucketPartitions``        ``P`` > 0: the buckets carry labels balanced over ``P`` state partitions
                            (:mod:`streamwarden.stream.sessions.buckets`); 0 (default): their numbers
==========================  ===========================================================================

Driver side (one long-lived process): :meth:`KafkaStreamReader.initialOffset`, ``latestOffset``,
``partitions``, ``commit``. Executor side: ``read`` on a pickled copy, so it only uses what travels in
:class:`~streamwarden.stream.source.range_reader.KafkaRange`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
from pyspark.sql.types import StructType

from streamwarden.atomic import read_json, write_json_atomic
from streamwarden.failures import ConfigError, DataLossError, EnvironmentFailure
from streamwarden.kafka.admin import (
    TopicPartitionId,
    Watermarks,
    list_offsets_watermarks,
    list_partitions,
    metadata_consumer,
    watermarks_within,
)
from streamwarden.runfiles.checkpoint import OffsetDoc
from streamwarden.stream.sessions.buckets import bucket_labels
from streamwarden.stream.sessions.packing import PACKED_INPUT_SCHEMA, pack_by_bucket, with_session_buckets
from streamwarden.stream.source.offsets import Positions, from_doc, pack, spread_limit, to_doc
from streamwarden.stream.source.range_reader import KafkaRange, read_ranges
from streamwarden.stream.source.schema import SPARK_DDL
from streamwarden.stream.worker_gc import spread_collections

log = logging.getLogger("streamwarden.stream.source")

FIRST_BATCH_RECORDS = 50_000
"""The most records the first batch after a start reads (a replay of an interrupted batch reads what its
offsets say): with a backlog the stream commits seconds after its start, its Python workers and state
stores warmed on a small batch, instead of after a full batch run cold (docs/benchmarks.md)."""
SOURCE_NAME = "pykafka"
_EARLIEST, _LATEST = -2, -1


def _flag(options: dict[str, str], name: str, default: bool) -> bool:
    value = options.get(name, str(default)).strip().lower()
    if value not in {"true", "false"}:
        raise ConfigError(f"option {name} must be true or false, got {value!r}")
    return value == "true"


def _seconds(options: dict[str, str], name: str, default: float) -> float:
    text = options.get(name, str(default))
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise ConfigError(f"option {name} must be a positive number of seconds, got {text!r}")
    return value


class KafkaSourceOptions:
    """Parsed, validated options of the source."""

    def __init__(self, raw: dict[str, str]) -> None:
        options = {k.lower(): v for k, v in raw.items()}  # Spark hands options over case-insensitively
        self.client_config = {k[len("kafka."):]: v for k, v in options.items() if k.startswith("kafka.")}
        if "bootstrap.servers" not in self.client_config:
            raise ConfigError("option kafka.bootstrap.servers is required")
        pattern = options.get("subscribepattern")
        if not pattern:
            raise ConfigError("option subscribePattern is required")
        self.pattern = pattern
        self.starting_offsets = options.get("startingoffsets", "earliest")
        self.fail_on_data_loss = _flag(options, "failondataloss", True)
        self.fail_on_topic_deletion = _flag(options, "failontopicdeletion", False)
        max_offsets = options.get("maxoffsetspertrigger")
        self.max_offsets = int(max_offsets) if max_offsets else None
        self.watermark_source = options.get("highwatermarksource", "fetch")
        if self.watermark_source not in {"fetch", "list_offsets"}:
            raise ConfigError(f"highWatermarkSource must be fetch or list_offsets, got {self.watermark_source}")
        self.stop_marker = Path(options["stopmarkerpath"]) if options.get("stopmarkerpath") else None
        self.initial_offsets_path = (Path(options["initialoffsetspath"])
                                     if options.get("initialoffsetspath") else None)
        self.read_timeout = float(options.get("readtimeout", "120"))
        self.watermark_timeout = _seconds(options, "watermarktimeout", 4.0)
        self.broker_timeout = _seconds(options, "brokertimeout", 300.0)
        self.max_read_tasks = int(options.get("maxreadtasks", "0"))
        self.pack_buckets = int(options.get("packsessionbuckets", "0"))
        self.bucket_partitions = int(options.get("bucketpartitions", "0"))


class KafkaDataSource(DataSource):
    """Registers as ``pykafka``; the schema is Spark's Kafka source's
    (:data:`~streamwarden.stream.source.schema.SPARK_DDL`), or the session job's packed input with
    ``packSessionBuckets``."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str | StructType:
        if KafkaSourceOptions(dict(self.options)).pack_buckets:
            return PACKED_INPUT_SCHEMA
        return SPARK_DDL

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(KafkaSourceOptions(dict(self.options)))


class KafkaStreamReader(DataSourceStreamReader):
    """Plans exact offset ranges per topic-partition and reads them on executors."""

    def __init__(self, options: KafkaSourceOptions) -> None:
        self.options = options
        self._consumer: Consumer | None = None
        self._latest: OffsetDoc | None = None
        self._known_ends: dict[TopicPartitionId, int] = {}
        self._answered_at = time.monotonic()  # the broker's last answer (or the reader's creation)
        self._inexact: set[TopicPartitionId] = set()
        self._planned = False  # a batch with records planned by this reader (after a start: none yet)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_consumer"] = None  # never ship the driver's client to executors
        state["_known_ends"] = {}
        return state

    # -- driver side ---------------------------------------------------------------------------
    def _meta(self) -> Consumer:
        if self._consumer is None:
            self._consumer = metadata_consumer(self.options.client_config)
        return self._consumer

    def _watermarks(self, reader_at: Positions | None = None) -> dict[TopicPartitionId, Watermarks]:
        """Every matching partition's watermarks (those beyond ``reader_at`` unfetched, see
        :func:`watermarks_within`); :class:`EnvironmentFailure` when the broker gave none."""
        partitions = list_partitions(self._meta(), self.options.pattern, self.options.watermark_timeout)
        if self.options.watermark_source == "list_offsets":
            listed = list_offsets_watermarks(self._meta(), partitions, self.options.watermark_timeout)
            return {tp: Watermarks(low, high, exact=True) for tp, (low, high) in listed.items()}
        marks = watermarks_within(self._meta(), partitions, self.options.watermark_timeout, self._known_ends,
                                  reader_at)
        inexact = {tp for tp, found in marks.items() if not found.exact and found.asked}
        if inexact != self._inexact:  # said once per change, not at every trigger
            if inexact:
                log.warning("no fetch answer within %.0fs for %s: planned up to ListOffsets' end (a lower bound); "
                            "asked again at the next trigger", self.options.watermark_timeout, _names(inexact))
            else:
                log.info("every partition's end answered exactly again")
            self._inexact = inexact
        return marks

    def _answered(self, reader_at: Positions | None = None) -> dict[TopicPartitionId, Watermarks] | None:
        """The watermarks, or None when the broker did not answer this time and ``brokerTimeout`` has not
        passed since its last answer (the next trigger asks again); past it, the ENVIRONMENT failure."""
        try:
            marks = self._watermarks(reader_at)
        except EnvironmentFailure as exc:
            silent = time.monotonic() - self._answered_at
            if silent >= self.options.broker_timeout:
                raise EnvironmentFailure(
                    f"the broker has not answered the source's queries for {silent:.0f}s (brokerTimeout "
                    f"{self.options.broker_timeout:.0f}s): {exc.message}") from None  # Spark's text names one class
            log.warning("the broker did not answer (%s); no new offsets this trigger, %.0fs of %.0fs without an "
                        "answer", exc.message, silent, self.options.broker_timeout)
            if self._consumer is not None:  # a client stuck on a dead connection is not reused
                self._consumer.close()
                self._consumer = None
            return None
        self._answered_at = time.monotonic()
        return marks

    def initialOffset(self) -> dict[str, Any]:
        path = self.options.initial_offsets_path
        persisted = read_json(path) if path else None
        if persisted is not None:
            return dict(persisted)
        marks = self._answered()
        while marks is None:  # no offsets to start from yet: ask until the broker answers or brokerTimeout
            time.sleep(1.0)
            marks = self._answered()
        spec = self.options.starting_offsets
        explicit = from_doc(json.loads(spec)) if spec not in {"earliest", "latest"} else {}
        positions: Positions = {}
        for tp, found in marks.items():
            low, high = found.low, found.high  # "latest" from a lower bound starts a little early, losing nothing
            wanted = explicit.get(tp, _LATEST if spec == "latest" else _EARLIEST)
            offset = low if wanted == _EARLIEST else high if wanted == _LATEST else wanted
            if offset < low and self.options.fail_on_data_loss:
                raise DataLossError(f"startingOffsets asks for {offset} but the earliest available is {low}",
                                    topic=tp.topic, partition=tp.partition, offset=offset,
                                    details={"expected": offset, "available": [low, high]})
            positions[tp] = offset
        doc = to_doc(positions)
        if path:
            write_json_atomic(path, doc)
        log.info("initial offsets: %s", doc)
        return dict(doc)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets:
            return ReadMaxRows(self.options.max_offsets)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        if self.options.stop_marker is not None and self.options.stop_marker.exists():
            log.info("stop marker %s present: planning no new offsets", self.options.stop_marker)
            return start
        begin = from_doc(start)
        marks = self._answered(begin)
        if marks is None:
            return start
        self._latest = to_doc({tp: found.high for tp, found in marks.items()})
        self._prune(begin, set(marks))
        latest: Positions = {}
        for tp, found in marks.items():
            if tp not in begin:
                latest[tp] = found.low  # new partition: enters at its earliest offset, read from the next batch
                log.warning("new topic-partition %s[%d] joins at offset %d", tp.topic, tp.partition, found.low)
            elif found.exact or begin[tp] < found.low:
                latest[tp] = self._checked_end(tp, begin[tp], found.low, found.high)
            else:  # a lower bound of the end proves no loss: plan up to it, never back
                latest[tp] = max(begin[tp], found.high)
        rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        if not self._planned:
            rows = min(rows or FIRST_BATCH_RECORDS, FIRST_BATCH_RECORDS)
        if rows is not None:
            latest = spread_limit({tp: p for tp, p in begin.items() if tp in latest}, latest, rows)
        self._planned = self._planned or any(end > begin.get(tp, end) for tp, end in latest.items())
        return dict(to_doc(latest))

    def _prune(self, begin: Positions, present: set[TopicPartitionId]) -> None:
        for tp in sorted(set(begin) - present):
            message = f"topic-partition {tp.topic}[{tp.partition}] no longer exists (last position {begin[tp]})"
            if self.options.fail_on_topic_deletion:
                raise DataLossError(message, topic=tp.topic, partition=tp.partition, offset=begin[tp])
            log.warning("%s: pruned from the offsets", message)

    def _checked_end(self, tp: TopicPartitionId, position: int, low: int, high: int) -> int:
        """The end to plan for ``tp``; fails (or resets) when the log no longer holds ``position``."""
        lost = position < low or position > high
        if lost and self.options.fail_on_data_loss:
            reason = "expired by retention" if position < low else "beyond the log end (topic recreated?)"
            raise DataLossError(f"next offset {position} is {reason}; available [{low}, {high})",
                                topic=tp.topic, partition=tp.partition, offset=position,
                                details={"expected": position, "available": [low, high]})
        if lost:
            log.warning("%s[%d]: offset %d unavailable, reading from %d", tp.topic, tp.partition, position, low)
        return high

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return dict(self._latest) if self._latest is not None else None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, finish = from_doc(start), from_doc(end)
        ranges = []
        for tp in sorted(finish):
            first = begin.get(tp, finish[tp])
            last = finish[tp]
            if last < first:  # failOnDataLoss=false and the log went backwards: read what exists
                first = 0
            if last > first:
                ranges.append(KafkaRange(tp.topic, tp.partition, first, last, self.options.client_config,
                                         self.options.fail_on_data_loss, self.options.read_timeout))
        packed = pack(ranges, lambda r: r.end - r.start, self.options.max_read_tasks)
        return [KafkaInputPartition(tasks) for tasks in packed]

    def commit(self, end: dict[str, Any]) -> None:
        """Spark committed ``end``; the checkpoint is the source of truth, nothing to do here."""

    def stop(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    # -- executor side -------------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, KafkaInputPartition)
        spread_collections()
        buckets = self.options.pack_buckets
        if buckets:
            labels = bucket_labels(buckets, self.options.bucket_partitions)
            return pack_by_bucket(with_session_buckets(batch, labels) for batch in read_ranges(partition.ranges))
        return read_ranges(partition.ranges)


class KafkaInputPartition(InputPartition):
    """Carries the :class:`KafkaRange` objects of one Spark task to an executor."""

    def __init__(self, ranges: list[KafkaRange]) -> None:
        super().__init__(ranges)
        self.ranges = ranges


def _names(partitions: set[TopicPartitionId]) -> str:
    return ", ".join(f"{tp.topic}[{tp.partition}]" for tp in sorted(partitions))
