"""Broker-side facts the source, the producer and the warden need: topics, partitions, watermarks.

Watermarks: Apache Kafka answers ListOffsets(latest) with the log end; Tansu answers with the base
offset of the last record batch + 1. The watermarks carried in a *fetch* response are right on both, so
:func:`fetch_high_watermarks` reads them from one fetch per partition: at the end it knew, or just
before the listed end.
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
KNOWN_END_GRACE_S = 2.0
"""How long :func:`fetch_high_watermarks` waits for a fetch at a known end before it lists the partition."""
FETCH_BUDGET_BYTES = 65_536
"""A metadata consumer's fetch size: it needs one batch per partition, not the data."""


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
        "fetch.wait.max.ms": 5,  # the end of the log is an answer: do not wait long for more
        "fetch.max.bytes": FETCH_BUDGET_BYTES,
        "message.max.bytes": FETCH_BUDGET_BYTES,  # librdkafka wants fetch.max.bytes >= message.max.bytes
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
    known: dict[TopicPartitionId, int] | None = None,
) -> dict[TopicPartitionId, tuple[int, int]]:
    """(low, high) per partition, both taken from a fetch response (right on every broker).

    librdkafka keeps the log start and the high watermark of the last fetch response per partition; a
    partition is answered by its first record or its end-of-log event after an assignment. Two ways:

    1. A partition in ``known`` (its exact end at the previous call; updated in place) is fetched at that
       end. Nothing new: the broker answers with the end of the log; something new: with the first new
       record batch. No ListOffsets; on Tansu, whose in-memory storage lists every record batch of a
       partition to answer ListOffsets or a fetch below the end, a partition with nothing new costs no
       listing at all, and one with new records costs one instead of three.
    2. Every other partition, and any the first way left unanswered after ``KNOWN_END_GRACE_S`` (its
       known end is beyond the log: the topic was recreated), is listed (ListOffsets earliest and latest)
       and fetched at ``listed_high - 1``: the start of the last batch on Tansu, the last record on Kafka.
    """
    memo = {} if known is None else known
    wanted = list(partitions)
    answered = _fetched_watermarks(consumer, {tp: memo[tp] for tp in wanted if tp in memo},
                                   min(timeout, KNOWN_END_GRACE_S))
    result = {tp: marks for tp, marks in answered.items() if marks[0] >= 0}  # else no log start: list it
    rest = [tp for tp in wanted if tp not in result]
    listed = list_offsets_watermarks(consumer, rest, timeout) if rest else {}
    result.update({tp: marks for tp, marks in listed.items() if marks[1] <= marks[0]})
    moved = {tp: high - 1 for tp, (low, high) in listed.items() if high > low}
    fetched = _fetched_watermarks(consumer, moved, timeout)
    if missing := sorted(set(moved) - set(fetched)):
        names = ", ".join(f"{tp.topic}[{tp.partition}]" for tp in missing)
        raise EnvironmentFailure(f"no fetch response for {names} within {timeout:.0f}s")
    result.update({tp: (listed[tp][0], max(fetched[tp][1], listed[tp][1])) for tp in moved})
    memo.update({tp: high for tp, (_, high) in result.items()})
    return result


def _fetched_watermarks(
    consumer: Consumer, positions: dict[TopicPartitionId, int], timeout: float
) -> dict[TopicPartitionId, tuple[int, int]]:
    """(low, high) of each partition assigned at ``positions``, from the fetch response that brings its
    first record or its end of log; partitions unanswered within ``timeout`` are left out. ``low`` is -1
    when the broker's fetch responses carry no log start offset.

    An answered partition is paused, so that the consumer's small fetch budget goes to the others.
    """
    if not positions:
        return {}
    assigned = [TopicPartition(tp.topic, tp.partition, offset) for tp, offset in sorted(positions.items())]
    consumer.assign(assigned)
    pending, found = set(positions), {}
    deadline = time.monotonic() + timeout
    try:
        while pending and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=len(pending) * 64, timeout=0.002):
                tp = TopicPartitionId(str(message.topic()), int(message.partition() or 0))
                error = message.error()
                if error is not None and error.code() != KafkaError._PARTITION_EOF:
                    raise EnvironmentFailure(f"fetch failed on {tp.topic}[{tp.partition}]: {error}",
                                             topic=tp.topic, partition=tp.partition)
                if tp not in pending:
                    continue
                pending.discard(tp)
                handle = TopicPartition(tp.topic, tp.partition)
                consumer.pause([handle])
                low, high = consumer.get_watermark_offsets(handle, cached=True)
                if high >= 0:
                    found[tp] = (int(low), int(high))
    finally:
        consumer.resume(assigned)
        consumer.unassign()
    return found


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
