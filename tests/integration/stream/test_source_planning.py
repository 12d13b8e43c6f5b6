"""The source's planning against a real broker: the first batch after a start is small, the next ones take the
cap, and a trigger with nothing new does not use up the first batch's limit."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from streamwarden.kafka.admin import fetch_high_watermarks, list_partitions, metadata_consumer
from streamwarden.local.broker import LocalBroker
from streamwarden.stream.source import kafka_source
from streamwarden.stream.source.kafka_source import KafkaSourceOptions, KafkaStreamReader
from streamwarden.stream.source.offsets import Positions, from_doc, to_doc


def planned(reader: KafkaStreamReader, start: Positions) -> Positions:
    return from_doc(reader.latestOffset(dict(to_doc(start)), reader.getDefaultReadLimit()))


def records(start: Positions, end: Positions) -> int:
    return sum(end[tp] - start[tp] for tp in end)


def produce_listed(broker: LocalBroker, topic: str, count: int) -> dict[int, int]:
    """Produce ``count`` records one record batch each, round-robin over the partitions, and return the log ends.
    Tansu lists a partition's end as its last record batch's first offset plus one, which the source plans as
    a lower bound (rightly: fewer records now, the rest at the next trigger); a batch of one record makes the
    listed end exact, so the planned counts below are the limits' alone."""
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0, "batch.num.messages": 1})
    for i in range(count):
        producer.produce(topic, value=b"x", key=str(i).encode(), partition=i % 2)
        producer.poll(0)
    assert producer.flush(30) == 0
    consumer = metadata_consumer({"bootstrap.servers": broker.bootstrap_servers})
    try:
        return {tp.partition: high for tp, (_, high) in
                fetch_high_watermarks(consumer, list_partitions(consumer, topic)).items()}
    finally:
        consumer.close()


@pytest.mark.parametrize("cap", [300, None])
def test_the_first_batch_after_a_start_reads_at_most_the_first_batch_limit_then_the_cap_applies(
    broker: LocalBroker, topic_factory: Callable[..., list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    cap: int | None,
) -> None:
    monkeypatch.setattr(kafka_source, "FIRST_BATCH_RECORDS", 100)
    [topic] = topic_factory(1, partitions=2)
    options = {"kafka.bootstrap.servers": broker.bootstrap_servers, "subscribePattern": topic,
               "stopMarkerPath": str(tmp_path / "stop"), "initialOffsetsPath": str(tmp_path / "initial.json")}
    if cap is not None:
        options["maxOffsetsPerTrigger"] = str(cap)
    reader = KafkaStreamReader(KafkaSourceOptions(options))
    start = from_doc(reader.initialOffset())
    assert planned(reader, start) == start  # nothing yet: the first batch's limit is kept for the first records

    ends = produce_listed(broker, topic, 1000)
    first = planned(reader, start)
    assert records(start, first) == 100 and set(first.values()) == {50}  # shared fairly between the partitions
    second = planned(reader, first)
    assert records(first, second) == (cap if cap is not None else 900)
    rest = second
    while {tp.partition: end for tp, end in rest.items()} != ends:  # on to the log's end, by the cap
        step = planned(reader, rest)
        assert 0 < records(rest, step) <= (cap or 1000)
        rest = step
    reader.stop()

    restarted = KafkaStreamReader(KafkaSourceOptions(options))  # a start: the next batch is small again
    more = produce_listed(broker, topic, 1000)
    after = planned(restarted, rest)
    assert records(rest, after) == 100 and sum(more.values()) == 2000
    restarted.stop()
