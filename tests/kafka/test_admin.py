"""Broker facts on the real local broker, whose ListOffsets(latest) lags the log end (NOTES)."""

from __future__ import annotations

from collections.abc import Callable

from streamwarden.kafka.admin import (
    TopicPartitionId,
    fetch_high_watermarks,
    list_offsets_watermarks,
    list_partitions,
    metadata_consumer,
)
from streamwarden.local.broker import LocalBroker
from support import produce_raw


def test_fetched_high_watermarks_are_the_log_end_and_only_moved_partitions_are_fetched(
    broker: LocalBroker, topic_factory: Callable[..., list[str]]
) -> None:
    topics = topic_factory(2, partitions=3)
    produced = produce_raw(broker.bootstrap_servers, topics, 60_000)
    consumer = metadata_consumer({"bootstrap.servers": broker.bootstrap_servers})
    try:
        partitions = list_partitions(consumer, f"{topics[0].rsplit('-', 1)[0]}-.*")
        assert len(partitions) == 6
        known: dict[TopicPartitionId, tuple[int, int]] = {}
        exact = {tp: high for tp, (_, high) in fetch_high_watermarks(consumer, partitions, known=known).items()}
        assert exact == {TopicPartitionId(t, p): end for t, parts in produced.items() for p, end in parts.items()}
        listed = list_offsets_watermarks(consumer, partitions)
        assert all(listed[tp][1] <= exact[tp] for tp in partitions)

        more = produce_raw(broker.bootstrap_servers, topics[:1], 900)
        again = fetch_high_watermarks(consumer, partitions, known=known)
        for tp in partitions:
            assert again[tp][1] == more.get(tp.topic, {}).get(tp.partition, exact[tp])
        assert again == fetch_high_watermarks(consumer, partitions)
    finally:
        consumer.close()
