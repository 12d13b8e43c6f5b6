"""Reads exactly one planned offset range ``[start, end)`` of one topic-partition into Arrow batches.

Runs on executors (inside ``DataSourceStreamReader.read``), so everything it needs travels in the
picklable :class:`KafkaRange`. It stops at the first offset ``>= end`` or at an end-of-partition event
at or beyond ``end`` -- never by counting records, because compaction and transaction markers leave
gaps in offsets.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, TopicPartition

from streamwarden.failures import DataLossError, EnvironmentFailure
from streamwarden.kafka_admin import make_consumer
from streamwarden.source.schema import ARROW_SCHEMA

_OUT_OF_RANGE = {KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE}


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
        "queued.max.messages.kbytes": str(256 * 1024),
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
        self.headers: list[list[dict[str, Any]] | None] = []

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


def read_range(task: KafkaRange) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``task`` as Arrow batches, failing loudly on lost offsets."""
    if task.end <= task.start:
        return
    consumer = _consumer(task)
    try:
        consumer.assign([TopicPartition(task.topic, task.partition, task.start)])
        columns = _Columns()
        expected_first = True
        last_progress = time.monotonic()
        done = False
        while not done:
            messages = consumer.consume(num_messages=10_000, timeout=1.0)
            if messages:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > task.read_timeout:
                raise EnvironmentFailure(
                    f"no record at or after the planned offset within {task.read_timeout:.0f}s "
                    f"(planned [{task.start}, {task.end}))",
                    topic=task.topic, partition=task.partition, offset=task.start)
            for message in messages:
                error = message.error()
                if error is not None:
                    done = _handle_event(task, consumer, error, message.offset() or -1)
                    if done:
                        break
                    continue
                offset = int(message.offset() or 0)
                if offset >= task.end:
                    done = True
                    break
                if expected_first and offset > task.start:
                    _check_gap_at_start(task, consumer, offset)
                expected_first = False
                columns.add(message)
                if offset == task.end - 1:
                    done = True
                    break
            if len(columns) >= task.batch_rows or (done and len(columns)):
                yield columns.to_batch(task.topic, task.partition)
                columns = _Columns()
    finally:
        consumer.close()


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
