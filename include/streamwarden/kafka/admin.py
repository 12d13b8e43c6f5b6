"""Broker-side facts the source, the producer and the warden need: topics, partitions, watermarks.

Watermarks: Apache Kafka answers ListOffsets(latest) with the log end; Tansu answers with the base
offset of the last record batch + 1. The high watermark carried in a *fetch* response is right on both,
so :func:`fetch_high_watermarks` seeks to just before the listed end and fetches once.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from streamwarden.failures import ConfigError, EnvironmentFailure

DEFAULT_RETENTION_MS = 7 * 24 * 3600 * 1000


@dataclass(frozen=True, order=True)
class TopicPartitionId:
    """A Kafka topic-partition, hashable and ordered."""

    topic: str
    partition: int


def admin_client(config: dict[str, str]) -> AdminClient:
    try:
        return AdminClient(dict(config))
    except KafkaException as exc:
        raise ConfigError(f"invalid Kafka client settings: {exc}") from exc


def make_consumer(config: dict[str, str | int | float | bool]) -> Consumer:
    """A consumer; an invalid client setting is a CONFIG failure naming the property."""
    try:
        return Consumer(config)
    except KafkaException as exc:
        raise ConfigError(f"invalid Kafka client settings: {exc}") from exc


def metadata_consumer(config: dict[str, str]) -> Consumer:
    """A consumer used only for metadata and watermarks (never commits)."""
    return make_consumer({
        **config,
        "group.id": f"streamwarden-meta-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": 10,
    })


def list_partitions(consumer: Consumer, pattern: str, timeout: float = 10.0) -> list[TopicPartitionId]:
    """Every partition of every topic whose name fully matches ``pattern`` (internal topics excluded)."""
    regex = re.compile(pattern)
    try:
        metadata = consumer.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise EnvironmentFailure(f"cannot list topics: {exc}") from exc
    found: list[TopicPartitionId] = []
    for name, topic in metadata.topics.items():
        if name.startswith("__") or not regex.fullmatch(name) or topic.error is not None:
            continue
        found.extend(TopicPartitionId(name, p) for p in topic.partitions)
    return sorted(found)


def list_offsets_watermarks(
    consumer: Consumer, partitions: Iterable[TopicPartitionId], timeout: float = 10.0
) -> dict[TopicPartitionId, tuple[int, int]]:
    """(low, high) per partition from ListOffsets; ``high`` is exact only on Apache Kafka."""
    result = {}
    for tp in partitions:
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=timeout)
        except KafkaException as exc:
            raise EnvironmentFailure(f"cannot read offsets of {tp.topic}[{tp.partition}]: {exc}",
                                     topic=tp.topic, partition=tp.partition) from exc
        result[tp] = (int(low), int(high))
    return result


def fetch_high_watermarks(
    consumer: Consumer,
    partitions: Iterable[TopicPartitionId],
    timeout: float = 10.0,
    known: dict[TopicPartitionId, tuple[int, int]] | None = None,
) -> dict[TopicPartitionId, tuple[int, int]]:
    """(low, high) per partition with ``high`` taken from a fetch response (right on every broker).

    For each non-empty partition the consumer is assigned at ``listed_high - 1`` (the start of the last
    batch on Tansu, the last record on Kafka) and polled until that partition returns a record or EOF;
    the watermark cached from that fetch is the log end. ``known`` (listed high -> exact high per
    partition, updated in place) skips the fetch for partitions whose listed end has not moved: a new
    batch always moves it, so only partitions with new data are fetched.
    """
    listed = list_offsets_watermarks(consumer, partitions, timeout)
    memo = {} if known is None else known
    result = {tp: (low, memo[tp][1]) if tp in memo and memo[tp][0] == high else (low, high)
              for tp, (low, high) in listed.items()}
    pending = {tp for tp, (low, high) in listed.items() if high > low and memo.get(tp, (-1, -1))[0] != high}
    if not pending:
        return result
    consumer.assign([TopicPartition(tp.topic, tp.partition, listed[tp][1] - 1) for tp in sorted(pending)])
    deadline = time.monotonic() + timeout
    try:
        while pending and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=len(pending) * 64, timeout=0.02):
                tp = TopicPartitionId(str(message.topic()), int(message.partition() or 0))
                error = message.error()
                if error is not None and error.code() != KafkaError._PARTITION_EOF:
                    raise EnvironmentFailure(f"fetch failed on {tp.topic}[{tp.partition}]: {error}",
                                             topic=tp.topic, partition=tp.partition)
                if tp in pending:
                    _, high = consumer.get_watermark_offsets(
                        TopicPartition(tp.topic, tp.partition), cached=True)
                    if high >= 0:
                        result[tp] = (listed[tp][0], max(int(high), listed[tp][1]))
                        pending.discard(tp)
    finally:
        consumer.unassign()
    if pending:
        names = ", ".join(f"{tp.topic}[{tp.partition}]" for tp in sorted(pending))
        raise EnvironmentFailure(f"no fetch response for {names} within {timeout:.0f}s")
    memo.update({tp: (listed[tp][1], high) for tp, (_, high) in result.items()})
    return result


def create_topics(
    config: dict[str, str],
    names: Iterable[str],
    partitions: int,
    retention_ms: int = DEFAULT_RETENTION_MS,
    timeout: float = 30.0,
) -> None:
    """Create topics (existing ones are left alone) with explicit retention and cleanup policy.

    Tansu's DescribeConfigs returns only the configs given at creation, so they are always given.
    """
    admin = admin_client(config)
    try:
        existing = set(admin.list_topics(timeout=min(timeout, 5.0)).topics)
    except KafkaException as exc:
        raise EnvironmentFailure(f"cannot reach the broker at {config.get('bootstrap.servers')} to create "
                                 f"topics: {exc.args[0].str() if exc.args else exc}") from None
    wanted = [
        NewTopic(name, num_partitions=partitions, replication_factor=1,
                 config={"retention.ms": str(retention_ms), "cleanup.policy": "delete"})
        for name in names if name not in existing
    ]
    if not wanted:
        return
    for name, future in admin.create_topics(wanted, operation_timeout=timeout).items():
        try:
            future.result(timeout)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise EnvironmentFailure(f"cannot create topic {name}: {exc}", topic=name) from exc


def delete_topics(config: dict[str, str], names: Iterable[str], timeout: float = 30.0) -> None:
    """Delete topics and wait until the broker no longer lists them."""
    admin = admin_client(config)
    names = list(names)
    for name, future in admin.delete_topics(names, operation_timeout=timeout).items():
        try:
            future.result(timeout)
        except KafkaException as exc:
            raise EnvironmentFailure(f"cannot delete topic {name}: {exc}", topic=name) from exc
    deadline = time.monotonic() + timeout
    while set(names) & set(admin.list_topics(timeout=timeout).topics):
        if time.monotonic() > deadline:
            raise EnvironmentFailure(f"topics {names} still listed {timeout:.0f}s after deletion")
        time.sleep(0.1)
