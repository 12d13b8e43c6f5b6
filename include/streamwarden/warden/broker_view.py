"""What the broker says about the stream's input: high watermarks, retention, oldest unprocessed record.

``retention.ms`` comes from DescribeConfigs; a topic that does not report it (Tansu reports only configs
given at creation) has an unknown retention, not an infinite one. The oldest unprocessed record is the
one at the committed offset: it is fetched and its timestamp read.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import ConfigResource, ResourceType  # type: ignore[attr-defined]

from streamwarden.failures import StreamwardenError
from streamwarden.kafka.admin import (
    TopicPartitionId,
    admin_client,
    fetch_high_watermarks,
    list_partitions,
    metadata_consumer,
)
from streamwarden.runfiles.checkpoint import OffsetDoc
from streamwarden.settings import Settings


@dataclass(frozen=True)
class BrokerView:
    """Broker facts per topic-partition; ``error`` says why they are missing when the broker failed."""

    watermarks: dict[TopicPartitionId, tuple[int, int]] = field(default_factory=dict)
    retention_ms: dict[str, int | None] = field(default_factory=dict)
    oldest_unprocessed_age_s: dict[TopicPartitionId, float] = field(default_factory=dict)
    error: str | None = None


def observe_broker(settings: Settings, committed: OffsetDoc, timeout: float, now: float) -> BrokerView:
    """Watermarks of every matching partition, retention per topic, and the age of the record at the
    committed offset of every partition with lag. Broker failures end up in ``error``, never raised."""
    config = settings.kafka_client_config()
    consumer = metadata_consumer({**config, "socket.timeout.ms": str(int(timeout * 1000))})
    try:
        partitions = list_partitions(consumer, settings.topic_pattern, timeout)
        watermarks = fetch_high_watermarks(consumer, partitions, timeout)
        positions = {tp: _position(committed, tp, low) for tp, (low, _) in watermarks.items()}
        waiting = {tp: positions[tp] for tp, (_, high) in watermarks.items() if positions[tp] < high}
        ages = {tp: now - ts for tp, ts in _timestamps_at(consumer, waiting, timeout).items()}
        retention = _retention_ms(config, sorted({tp.topic for tp in partitions}), timeout)
        return BrokerView(watermarks, retention, ages)
    except (StreamwardenError, KafkaException) as exc:
        return BrokerView(error=str(exc).split(" [streamwarden:")[0])
    finally:
        consumer.close()


def _position(committed: OffsetDoc, tp: TopicPartitionId, low: int) -> int:
    """The committed offset, or the log start for a partition the stream has not committed yet."""
    return committed.get(tp.topic, {}).get(str(tp.partition), low)


def _timestamps_at(consumer: Consumer, offsets: dict[TopicPartitionId, int],
                   timeout: float) -> dict[TopicPartitionId, float]:
    """Epoch seconds of the record at each given offset (the first one at or after it)."""
    if not offsets:
        return {}
    consumer.assign([TopicPartition(tp.topic, tp.partition, offset) for tp, offset in offsets.items()])
    found: dict[TopicPartitionId, float] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(found) < len(offsets) and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=len(offsets), timeout=0.2):
                error = message.error()
                if error is not None and error.code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(error)
                tp = TopicPartitionId(str(message.topic()), int(message.partition() or 0))
                _, stamp = message.timestamp()
                if error is None and tp in offsets and tp not in found and stamp > 0:
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
