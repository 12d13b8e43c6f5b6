"""What the broker says about the stream's input: high watermarks, retention, oldest unprocessed record.

``retention.ms`` comes from DescribeConfigs; a topic that does not report it (Tansu reports only configs
given at creation) has an unknown retention, not an infinite one. The oldest unprocessed record is the
one at the committed offset: it is fetched and its timestamp read.

The health check asks with ``best_effort``: it needs the lag most when the stream is down, which is when a
broker struggles (a long log, a backlog). A failed fetch-based watermark query then falls back to ListOffsets
(exact on Apache Kafka; on Tansu the start of the last record batch + 1, so each lag is a lower bound), and a
failed age or retention query leaves those figures out; each is said in ``notes``. Validation asks strictly:
a lower bound there would look like a truncated log.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import ConfigResource, ResourceType  # type: ignore[attr-defined]

from streamwarden.failures import StreamwardenError
from streamwarden.kafka.admin import (
    TopicPartitionId,
    admin_client,
    fetch_high_watermarks,
    list_offsets_watermarks,
    list_partitions,
    metadata_consumer,
)
from streamwarden.runfiles.checkpoint import OffsetDoc
from streamwarden.settings import Settings
from streamwarden.testing.faults import chaos_point

T = TypeVar("T")
BROKER_ERRORS = (StreamwardenError, KafkaException, TimeoutError)
"""What a broker query raises when the broker fails or does not answer in time."""


@dataclass(frozen=True)
class BrokerView:
    """Broker facts per topic-partition; ``error`` says why they are missing when the broker failed.

    ``listed``: the high watermarks are ListOffsets' (best effort only), raised to the committed position where
    they were below it (the stream has read that far, so the log reaches it): lower bounds. ``notes``: what a
    best-effort look could not learn, and why.
    """

    watermarks: dict[TopicPartitionId, tuple[int, int]] = field(default_factory=dict)
    retention_ms: dict[str, int | None] = field(default_factory=dict)
    oldest_unprocessed_age_s: dict[TopicPartitionId, float] = field(default_factory=dict)
    error: str | None = None
    listed: bool = False
    notes: list[str] = field(default_factory=list)


def observe_broker(settings: Settings, committed: OffsetDoc, timeout: float, now: float, *,
                   best_effort: bool = False) -> BrokerView:
    """Watermarks of every matching partition, retention per topic, and the age of the record at the
    committed offset of every partition with lag. Broker failures end up in ``error`` (or, with
    ``best_effort``, in ``notes`` when something was learnt), never raised."""
    config = settings.kafka_client_config()
    consumer = metadata_consumer({**config, "socket.timeout.ms": str(int(timeout * 1000))})
    notes: list[str] = []
    try:
        partitions = list_partitions(consumer, settings.topic_pattern, timeout)
        try:
            chaos_point("watermarks_fetch")  # tests: the fetch-based query failing, as it does on a slow broker
            watermarks, listed = fetch_high_watermarks(consumer, partitions, timeout), False
        except BROKER_ERRORS as exc:
            if not best_effort:
                raise
            notes.append(f"high watermarks from ListOffsets (lags are lower bounds): the fetch-based query "
                         f"failed: {_message(exc)}")
            listed_marks = list_offsets_watermarks(consumer, partitions, timeout)
            watermarks = {tp: (low, max(high, _position(committed, tp, low)))
                          for tp, (low, high) in listed_marks.items()}
            listed = True
        positions = {tp: _position(committed, tp, low) for tp, (low, _) in watermarks.items()}
        waiting = {tp: positions[tp] for tp, (_, high) in watermarks.items() if positions[tp] < high}
        ages = _best_effort(lambda: {tp: now - ts for tp, ts in timestamps_at(consumer, waiting, timeout).items()
                                     if ts is not None},
                            "age of the oldest unprocessed record", best_effort, notes) or {}
        retention = _best_effort(lambda: _retention_ms(config, sorted({tp.topic for tp in partitions}), timeout),
                                 "retention", best_effort, notes) or {}
        return BrokerView(watermarks, retention, ages, listed=listed, notes=notes)
    except BROKER_ERRORS as exc:
        return BrokerView(error=_message(exc), notes=notes)
    finally:
        consumer.close()


def _message(exc: BaseException) -> str:
    return (str(exc) or type(exc).__name__).split(" [streamwarden:")[0]


def _best_effort(query: Callable[[], T], what: str, best_effort: bool, notes: list[str]) -> T | None:
    """The query's answer; with ``best_effort`` a broker failure is noted and None returned, else raised."""
    try:
        return query()
    except BROKER_ERRORS as exc:
        if not best_effort:
            raise
        notes.append(f"{what} unknown: {_message(exc)}")
        return None


def _position(committed: OffsetDoc, tp: TopicPartitionId, low: int) -> int:
    """The committed offset, or the log start for a partition the stream has not committed yet."""
    return committed.get(tp.topic, {}).get(str(tp.partition), low)


def timestamps_at(consumer: Consumer, offsets: dict[TopicPartitionId, int],
                  timeout: float) -> dict[TopicPartitionId, float | None]:
    """Epoch seconds of the record at each given offset (the first one at or after it), ``None`` for a
    partition whose log ends there (nothing at or after it); partitions without an answer within ``timeout``
    are left out."""
    if not offsets:
        return {}
    consumer.assign([TopicPartition(tp.topic, tp.partition, offset) for tp, offset in offsets.items()])
    found: dict[TopicPartitionId, float | None] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(found) < len(offsets) and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=len(offsets), timeout=0.2):
                error = message.error()
                if error is not None and error.code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(error)
                tp = TopicPartitionId(str(message.topic()), int(message.partition() or 0))
                if tp not in offsets or tp in found:
                    continue
                _, stamp = message.timestamp()
                if error is not None:
                    found[tp] = None
                elif stamp > 0:
                    found[tp] = stamp / 1000.0
    finally:
        consumer.unassign()
    return found


def _retention_ms(config: dict[str, str], topics: list[str], timeout: float) -> dict[str, int | None]:
    """``retention.ms`` per topic; ``None`` when the broker does not report it (unknown, not infinite)."""
    if not topics:
        return {}
    admin = admin_client(config)
    futures = admin.describe_configs([ConfigResource(ResourceType.TOPIC, t) for t in topics],
                                     request_timeout=timeout)
    found: dict[str, int | None] = {}
    for resource, future in futures.items():
        entry = future.result(timeout).get("retention.ms")
        found[resource.name] = None if entry is None or entry.value is None else int(entry.value)
    return found
