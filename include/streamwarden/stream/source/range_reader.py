"""Reads planned offset ranges ``[start, end)`` of topic-partitions into Arrow batches.

Runs on executors (inside ``DataSourceStreamReader.read``), so everything it needs travels in the
picklable :class:`KafkaRange`. One Spark task may read several ranges, one after the other, with one
consumer. Each range stops at the first offset ``>= end`` or at an end-of-partition event at or beyond
``end`` -- never by counting records, because compaction and transaction markers leave gaps in offsets.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, TopicPartition

from streamwarden.failures import DataLossError, EnvironmentFailure
from streamwarden.kafka.admin import make_consumer
from streamwarden.stream.source.schema import ARROW_SCHEMA

_OUT_OF_RANGE = {KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE}
FETCH_QUEUE_BACKOFF_MS = 5


@dataclass(frozen=True)
class KafkaRange:
    """One Spark input partition: records ``[start, end)`` of ``topic[partition]``."""

    topic: str
    partition: int
    start: int
    end: int
    client_config: dict[str, str]
    fail_on_data_loss: bool
    read_timeout: float
    batch_rows: int = 20_000


def _consumer(task: KafkaRange) -> Consumer:
    return make_consumer({
        "fetch.max.bytes": str(64 * 1024 * 1024),
        "max.partition.fetch.bytes": str(16 * 1024 * 1024),
        # What the consumer fetches ahead is held in the reading Python worker: the least that reads as fast
        # (docs/tuning.md).
        "queued.max.messages.kbytes": str(32 * 1024),
        # When that queue is full, librdkafka waits this long before it fetches again (default 1 s): a reader that
        # empties it in less waited in consume() for the rest (docs/tuning.md).
        "fetch.queue.backoff.ms": str(FETCH_QUEUE_BACKOFF_MS),
        **task.client_config,
        "group.id": f"streamwarden-reader-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error" if task.fail_on_data_loss else "earliest",
    })


class _Columns:
    """Column buffers for one Arrow record batch."""

    def __init__(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.timestamps: list[int | None] = []
        self.ts_types: list[int] = []
        self.headers: list[list[dict[str, str | bytes | None]] | None] = []

    def add(self, message: Any) -> None:
        self.keys.append(message.key())
        self.values.append(message.value())
        self.offsets.append(message.offset())
        ts_type, ts_ms = message.timestamp()
        self.timestamps.append(ts_ms * 1000 if ts_ms >= 0 else None)
        self.ts_types.append(max(ts_type - 1, 0))  # librdkafka: 1=create, 2=log-append; Kafka: 0, 1
        raw_headers = message.headers()
        self.headers.append(None if not raw_headers else [{"key": k, "value": v} for k, v in raw_headers])

    def __len__(self) -> int:
        return len(self.offsets)

    def to_batch(self, topic: str, partition: int) -> pa.RecordBatch:
        n = len(self.offsets)
        return pa.RecordBatch.from_arrays(
            [
                pa.array(self.keys, pa.binary()),
                pa.array(self.values, pa.binary()),
                pa.array([topic] * n, pa.string()),
                pa.array([partition] * n, pa.int32()),
                pa.array(self.offsets, pa.int64()),
                pa.array(self.timestamps, pa.timestamp("us", tz="UTC")),
                pa.array(self.ts_types, pa.int32()),
                pa.array(self.headers, ARROW_SCHEMA.field("headers").type),
            ],
            schema=ARROW_SCHEMA,
        )


def read_ranges(tasks: Sequence[KafkaRange]) -> Iterator[pa.RecordBatch]:
    """Yield the records of every range as Arrow batches (one topic-partition each), failing loudly on
    lost offsets. All ranges are assigned at once to one consumer, so one fetch serves them all."""
    pending: dict[tuple[str | None, int | None], _Pending] = {
        (task.topic, task.partition): _Pending(task) for task in tasks if task.end > task.start}
    if not pending:
        return
    consumer = _consumer(tasks[0])  # the ranges of one plan share their settings
    try:
        consumer.assign([TopicPartition(p.task.topic, p.task.partition, p.task.start) for p in pending.values()])
        last_progress = time.monotonic()
        while pending:
            # Ask for no more than the ranges still hold: consume() returns when it has that many messages
            # (or end-of-partition events), instead of waiting out its timeout.
            wanted = sum(p.task.end - p.position for p in pending.values())
            messages = consumer.consume(num_messages=max(1, min(10_000, wanted)), timeout=1.0)
            if messages:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > tasks[0].read_timeout:
                late = next(iter(pending.values()))
                raise EnvironmentFailure(
                    f"no record at or after the planned offset within {late.task.read_timeout:.0f}s "
                    f"(planned [{late.task.start}, {late.task.end}))",
                    topic=late.task.topic, partition=late.task.partition, offset=late.position)
            for message in messages:
                key = (message.topic(), message.partition())
                state = pending.get(key)
                error = message.error()
                if state is None:  # a finished range's read-ahead or event, or a client-wide event
                    if message.topic() is None and error is not None and (error.fatal() or not error.retriable()):
                        raise EnvironmentFailure(f"Kafka consumer error: {error}")
                    continue
                done = (_handle_event(state.task, consumer, error, message.offset() or -1) if error is not None
                        else state.add(consumer, message))
                if len(state.columns) and (done or len(state.columns) >= state.task.batch_rows):
                    yield state.flush()
                if done:
                    consumer.pause([TopicPartition(state.task.topic, state.task.partition)])
                    del pending[key]
    finally:
        consumer.close()


class _Pending:
    """A range being read: its next expected offset and the records not yet yielded."""

    def __init__(self, task: KafkaRange) -> None:
        self.task = task
        self.position = task.start
        self.columns = _Columns()

    def add(self, consumer: Consumer, message: Any) -> bool:
        """Take one record; True when the range is complete."""
        offset = int(message.offset() or 0)
        if offset >= self.task.end:
            return True
        if self.position == self.task.start and offset > self.task.start:
            _check_gap_at_start(self.task, consumer, offset)
        self.position = offset + 1
        self.columns.add(message)
        return offset == self.task.end - 1

    def flush(self) -> pa.RecordBatch:
        batch = self.columns.to_batch(self.task.topic, self.task.partition)
        self.columns = _Columns()
        return batch


def _handle_event(task: KafkaRange, consumer: Consumer, error: KafkaError, offset: int) -> bool:
    """React to a consumer event; True when the range is complete."""
    where: dict[str, Any] = {"topic": task.topic, "partition": task.partition}
    if error.code() == KafkaError._PARTITION_EOF:
        if offset >= task.end:
            return True
        low, high = consumer.get_watermark_offsets(TopicPartition(task.topic, task.partition), timeout=10)
        if high < task.end and task.fail_on_data_loss:
            raise DataLossError(
                f"partition ends at {high} but offsets up to {task.end} were planned "
                "(topic deleted and recreated, or truncated)",
                offset=high, details={"expected_end": task.end, "available": [low, high]}, **where)
        return high < task.end  # nothing more will come: finish with what exists
    if error.code() in _OUT_OF_RANGE:
        low, high = consumer.get_watermark_offsets(TopicPartition(task.topic, task.partition), timeout=10)
        raise DataLossError(
            f"planned start offset {task.start} is no longer available (earliest {low}, latest {high}); "
            "the records were removed by retention before they were read",
            offset=task.start, details={"expected": task.start, "available": [low, high]}, **where)
    if error.fatal() or not error.retriable():
        raise EnvironmentFailure(f"Kafka consumer error: {error}", offset=offset, **where)
    return False


def _check_gap_at_start(task: KafkaRange, consumer: Consumer, first: int) -> None:
    """A first offset above ``start`` is loss unless the log still begins at or before ``start``."""
    low, high = consumer.get_watermark_offsets(TopicPartition(task.topic, task.partition), timeout=10)
    if low > task.start and task.fail_on_data_loss:
        raise DataLossError(
            f"expected offset {task.start} but the first available is {first} (earliest {low}): "
            "records expired before they were read",
            offset=task.start, details={"expected": task.start, "first_fetched": first,
                                        "available": [low, high]},
            topic=task.topic, partition=task.partition)
