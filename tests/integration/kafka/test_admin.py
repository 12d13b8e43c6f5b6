"""Broker facts on the real local broker, whose ListOffsets(latest) lags the log end (NOTES)."""

from __future__ import annotations

from collections.abc import Callable

from fixtures.stream_process import produce_raw
from streamwarden.kafka.admin import (
    TopicPartitionId,
    fetch_high_watermarks,
    list_offsets_watermarks,
    list_partitions,
    metadata_consumer,
)
from streamwarden.local.broker import LocalBroker


def test_fetched_watermarks_are_the_log_end_whether_listed_or_fetched_at_the_known_end(
    broker: LocalBroker, topic_factory: Callable[..., list[str]]
) -> None:
    topics = topic_factory(2, partitions=3)
    produced = produce_raw(broker.bootstrap_servers, topics, 60_000)
    consumer = metadata_consumer({"bootstrap.servers": broker.bootstrap_servers})
    try:
        partitions = list_partitions(consumer, f"{topics[0].rsplit('-', 1)[0]}-.*")
        assert len(partitions) == 6
        known: dict[TopicPartitionId, int] = {}
        exact = {tp: high for tp, (_, high) in fetch_high_watermarks(consumer, partitions, known=known).items()}
        assert exact == {TopicPartitionId(t, p): end for t, parts in produced.items() for p, end in parts.items()}
        assert known == exact
        listed = list_offsets_watermarks(consumer, partitions)
        assert all(listed[tp][1] <= exact[tp] for tp in partitions)

        more = produce_raw(broker.bootstrap_servers, topics[:1], 900)
        again = fetch_high_watermarks(consumer, partitions, known=known)  # moved and unmoved, at known ends
        for tp in partitions:
            assert again[tp] == (0, more.get(tp.topic, {}).get(tp.partition, exact[tp]))
        assert again == fetch_high_watermarks(consumer, partitions)  # the same as listing every partition
        assert known == {tp: high for tp, (_, high) in again.items()}
    finally:
        consumer.close()


def test_a_known_end_beyond_the_log_is_listed_instead(
    broker: LocalBroker, topic_factory: Callable[..., list[str]]
) -> None:
    """A known end the log no longer reaches (the topic was recreated) gets no fetch answer from Tansu; the
    partition is listed after the grace. (Recreating the topic under this consumer would test the same, but
    librdkafka 2.16 crashes in its metadata cache when Tansu recreates a topic it has fetched from.)"""
    [topic] = topic_factory(1, partitions=2)
    produced = produce_raw(broker.bootstrap_servers, [topic], 300)
    consumer = metadata_consumer({"bootstrap.servers": broker.bootstrap_servers})
    try:
        partitions = list_partitions(consumer, topic)
        known = {TopicPartitionId(topic, p): end + 1_000 for p, end in produced[topic].items()}
        marks = fetch_high_watermarks(consumer, partitions, known=known)
        assert marks == {TopicPartitionId(topic, p): (0, end) for p, end in produced[topic].items()}
        assert known == {tp: high for tp, (_, high) in marks.items()}
    finally:
        consumer.close()
