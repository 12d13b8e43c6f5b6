"""Broker-side facts the source, the producer and the warden need: topics, partitions, watermarks.

Watermarks: Apache Kafka answers ListOffsets(latest) with the log end; Tansu answers with the base
offset of the last record batch + 1. The watermarks carried in a *fetch* response are right on both, so
:func:`watermarks_within` lists every partition, then fetches each once, at the end it knew or just
before the listed end, within a time budget; :func:`fetch_high_watermarks` is its strict form.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from streamwarden.failures import ConfigError, EnvironmentFailure

DEFAULT_RETENTION_MS = 7 * 24 * 3600 * 1000
KNOWN_END_GRACE_S = 2.0
"""How long :func:`watermarks_within` waits for its first fetches (at known ends: an answer at once) before it
asks the unanswered partitions just before their listed end."""
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
    """(low, high) per partition from ListOffsets; ``high`` is exact only on Apache Kafka (on Tansu it is the
    start of the last record batch + 1: a lower bound). ``timeout`` bounds the whole listing, not each
    partition, so a broker that stopped answering costs one ``timeout``, not one per partition."""
    result = {}
    deadline = time.monotonic() + timeout
    for tp in partitions:
        left = deadline - time.monotonic()
        try:
            if left <= 0:
                raise KafkaException(f"no ListOffsets answer within {timeout:.0f}s")
            low, high = consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=left)
        except KafkaException as exc:
            raise EnvironmentFailure(f"cannot read offsets of {tp.topic}[{tp.partition}]: {exc}",
                                     topic=tp.topic, partition=tp.partition) from exc
        result[tp] = (int(low), int(high))
    return result


@dataclass(frozen=True)
class Watermarks:
    """A partition's log start and end as the broker answered them; ``exact`` is false when ``high`` is only
    ListOffsets' answer, a lower bound of the end on Tansu: its fetch did not answer in time, or it was not
    asked (``asked`` false: the listed end was already beyond the reader's position)."""

    low: int
    high: int
    exact: bool
    asked: bool = True


def watermarks_within(
    consumer: Consumer,
    partitions: Iterable[TopicPartitionId],
    budget: float,
    known: dict[TopicPartitionId, int] | None = None,
    reader_at: Mapping[TopicPartitionId, int] | None = None,
) -> dict[TopicPartitionId, Watermarks]:
    """Every partition's watermarks in one ListOffsets round and at most ``budget`` seconds of fetching.

    ListOffsets answers the log start exactly on every broker, and the end exactly on Apache Kafka; on
    Tansu it answers the start of the last record batch + 1. A fetch response carries the exact end on
    both, so a partition is fetched once, in one assignment for all:

    * at its end known from the previous call (``known``, updated in place with every exact end) when
      ListOffsets shows no batch after it: the broker answers at once with the end of its log;
    * otherwise just before the listed end (the last batch on Tansu, the last record on Kafka);
    * a partition unanswered after ``KNOWN_END_GRACE_S`` (its known end beyond a recreated topic's log, or
      a slow answer) is asked again just before the listed end for the rest of the budget.

    On Tansu the cost of a fetch below the end grows with the partition's log while records are being
    produced, so the fetch has ``budget`` seconds; a partition left unanswered keeps the listed end with
    ``exact=False`` (never beyond the real end, so a reader planned up to it reads nothing that is not
    there), to be asked again at the next call. Raises :class:`EnvironmentFailure` only when ListOffsets
    itself gets no answer within ``budget``: the broker is unreachable.

    ``reader_at``, a stream reader's positions, spares that cost while records arrive: a partition whose
    listed end is beyond its position is not fetched (``asked=False``): the reader has that far to read, and
    the rest of the last batch follows once the listed end stops moving, when the partition is fetched again.
    A caught-up stream then pays ListOffsets alone, whatever the log's length.
    """
    memo = {} if known is None else known
    wanted = list(partitions)
    listed = list_offsets_watermarks(consumer, wanted, budget)
    ahead = {tp for tp, (_, high) in listed.items() if reader_at is not None and high > reader_at.get(tp, high)}
    fetch_at = {}
    for tp, (low, high) in listed.items():
        if high <= low or tp in ahead:
            continue  # an empty log, or one the reader has yet to reach: nothing to fetch
        end = memo.get(tp)
        fetch_at[tp] = end if end is not None and high <= end else high - 1
    deadline = time.monotonic() + budget
    fetched = _fetched_watermarks(consumer, fetch_at, min(budget, KNOWN_END_GRACE_S))
    # A known end the log no longer reaches (the topic was recreated) gets no answer from Tansu: ask those,
    # and the fetches still unanswered, just before the listed end for the rest of the budget.
    again = {tp: listed[tp][1] - 1 for tp in fetch_at if tp not in fetched}
    fetched.update(_fetched_watermarks(consumer, again, deadline - time.monotonic()) if again else {})
    result = {}
    for tp, (low, high) in listed.items():
        if tp in fetched and fetched[tp][1] >= high:
            result[tp] = Watermarks(low, fetched[tp][1], exact=True)
        else:  # an empty log, one not asked, or a fetch with no answer in time (or at an end no longer reached)
            result[tp] = Watermarks(low, high, exact=tp not in fetch_at and tp not in ahead, asked=tp not in ahead)
    memo.update({tp: marks.high for tp, marks in result.items() if marks.exact})
    return result


def fetch_high_watermarks(
    consumer: Consumer,
    partitions: Iterable[TopicPartitionId],
    timeout: float = 10.0,
    known: dict[TopicPartitionId, int] | None = None,
) -> dict[TopicPartitionId, tuple[int, int]]:
    """Exact (low, high) of every partition (:func:`watermarks_within`), for checks that must not work on a
    lower bound (validation, recovery plans); a partition whose fetch did not answer within ``timeout`` is
    an :class:`EnvironmentFailure` naming it."""
    marks = watermarks_within(consumer, partitions, timeout, known)
    if missing := sorted(tp for tp, found in marks.items() if not found.exact):
        names = ", ".join(f"{tp.topic}[{tp.partition}]" for tp in missing)
        raise EnvironmentFailure(f"no fetch response for {names} within {timeout:.0f}s")
    return {tp: (found.low, found.high) for tp, found in marks.items()}


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
