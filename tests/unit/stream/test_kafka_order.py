"""A bucket's records are put in Kafka order by position, as ``sort_by`` on (topic, partition, offset) orders them."""

from __future__ import annotations

import random

import pyarrow as pa

from streamwarden.stream.sessions.packing import kafka_order


def test_the_order_is_sort_bys_over_topics_by_name_partitions_and_offsets() -> None:
    rnd = random.Random(7)
    topics = ["sites-b", "sites-a10", "sites-a2", "sites-a", "sités-ü"]  # by name, not by first appearance
    rows = [(rnd.choice(topics), rnd.randrange(4), rnd.randrange(10**12)) for _ in range(5_000)]
    records = pa.table({"topic": [t for t, _, _ in rows], "partition": pa.array([p for _, p, _ in rows], pa.int32()),
                        "offset": [o for _, _, o in rows], "value": [b"v%d" % i for i in range(len(rows))]})
    expected = records.sort_by([("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")])
    assert records.take(kafka_order(records)).equals(expected)


def test_chunked_and_empty_tables_are_ordered_too() -> None:
    chunk = pa.table({"topic": ["b", "a"], "partition": pa.array([0, 1], pa.int32()), "offset": [5, 9]})
    later = pa.table({"topic": ["a"], "partition": pa.array([1], pa.int32()), "offset": [2]})
    records = pa.concat_tables([chunk, chunk.slice(0, 0), later])
    assert records.take(kafka_order(records)).to_pydict() == {"topic": ["a", "a", "b"], "partition": [1, 1, 0],
                                                             "offset": [2, 9, 5]}
    assert kafka_order(chunk.slice(0, 0)).tolist() == []
