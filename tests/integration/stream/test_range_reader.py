"""The executor-side reader: several planned ranges in one task, each exact, on a real broker."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from fixtures.stream_process import produce_raw
from streamwarden.failures import DataLossError
from streamwarden.local.broker import LocalBroker
from streamwarden.stream.source.range_reader import KafkaRange, read_ranges


def _range(broker: LocalBroker, topic: str, partition: int, start: int, end: int) -> KafkaRange:
    return KafkaRange(topic, partition, start, end, {"bootstrap.servers": broker.bootstrap_servers}, True, 30.0,
                      batch_rows=50)


def test_one_task_reads_many_ranges_exactly(broker: LocalBroker, topic_factory: Callable[..., list[str]]) -> None:
    topics = topic_factory(2, partitions=3)
    ends = produce_raw(broker.bootstrap_servers, topics, 1200)
    ranges = []
    for i, (topic, partition) in enumerate((t, p) for t in topics for p in range(3)):
        end = ends[topic][partition]
        # to the log end (stops on the end-of-partition event), short of it, from the middle, and empty
        start, stop = [(0, end), (0, end - 7), (end // 2, end), (5, 5)][i % 4]
        ranges.append(_range(broker, topic, partition, start, stop))

    got: dict[tuple[str, int], list[int]] = {}
    for batch in read_ranges(ranges):
        assert batch.num_rows <= 50
        (topic,), (partition,) = set(batch.column("topic").to_pylist()), set(batch.column("partition").to_pylist())
        got.setdefault((topic, partition), []).extend(batch.column("offset").to_pylist())

    expected = {(r.topic, r.partition): list(range(r.start, r.end)) for r in ranges if r.end > r.start}
    assert got == expected


def test_a_range_past_the_log_end_is_data_loss_naming_it(
    broker: LocalBroker, topic_factory: Callable[..., list[str]]
) -> None:
    (topic,) = topic_factory(1, partitions=2)
    ends = produce_raw(broker.bootstrap_servers, [topic], 100)
    fine, beyond = _range(broker, topic, 0, 0, ends[topic][0]), _range(broker, topic, 1, 0, ends[topic][1] + 10)
    with pytest.raises(DataLossError) as raised:
        list(read_ranges([fine, beyond]))
    assert (raised.value.topic, raised.value.partition) == (topic, 1)
