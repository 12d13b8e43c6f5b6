"""The source's driver side against a real broker that answers slowly or not at all: never fatal on its own,
classified ENVIRONMENT only past ``brokerTimeout``, and a lower bound of a partition's end never taken as loss."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from fixtures.stream_process import produce_raw
from streamwarden.failures import EnvironmentFailure
from streamwarden.kafka.admin import TopicPartitionId, list_partitions, metadata_consumer, watermarks_within
from streamwarden.local.broker import LocalBroker
from streamwarden.stream.source.kafka_source import KafkaSourceOptions, KafkaStreamReader
from streamwarden.stream.source.offsets import from_doc, to_doc


@pytest.fixture()
def own_broker(tmp_path: Path) -> Iterator[LocalBroker]:
    """A broker of this test's own: it is stopped with SIGSTOP, which the shared one must never be."""
    with LocalBroker(log_path=tmp_path / "tansu.log") as running:
        yield running


@contextmanager
def frozen(broker: LocalBroker) -> Iterator[None]:
    """The broker's process stopped (SIGSTOP): connections stay open, nothing answers."""
    assert broker.process is not None
    os.kill(broker.process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(broker.process.pid, signal.SIGCONT)


def reader(broker: LocalBroker, pattern: str, tmp_path: Path, **extra: str) -> KafkaStreamReader:
    return KafkaStreamReader(KafkaSourceOptions({
        "kafka.bootstrap.servers": broker.bootstrap_servers, "subscribePattern": pattern,
        "stopMarkerPath": str(tmp_path / "stop"), "initialOffsetsPath": str(tmp_path / "initial.json"), **extra}))


def test_an_unanswered_fetch_leaves_the_listed_end_as_a_lower_bound(
    broker: LocalBroker, topic_factory: Callable[..., list[str]]
) -> None:
    """Known ends beyond the log get no fetch answer from Tansu; with a budget shorter than the grace the
    partitions keep ListOffsets' end, marked inexact and never beyond the log's real end."""
    [topic] = topic_factory(1, partitions=2)
    produced = produce_raw(broker.bootstrap_servers, [topic], 400)
    consumer = metadata_consumer({"bootstrap.servers": broker.bootstrap_servers})
    try:
        partitions = list_partitions(consumer, topic)
        known = {tp: produced[topic][tp.partition] + 1_000 for tp in partitions}
        marks = watermarks_within(consumer, partitions, 0.5, known)
        assert all(not found.exact and 0 < found.high <= produced[topic][tp.partition]
                   for tp, found in marks.items())
        assert known == {tp: produced[topic][tp.partition] + 1_000 for tp in partitions}  # no guess remembered
        exact = watermarks_within(consumer, partitions, 10.0)
        assert {tp: (m.high, m.exact) for tp, m in exact.items()} == {
            tp: (produced[topic][tp.partition], True) for tp in partitions}
    finally:
        consumer.close()


def test_a_lower_bound_below_the_position_is_no_data_loss(
    broker: LocalBroker, topic_factory: Callable[..., list[str]], tmp_path: Path
) -> None:
    """The source plans nothing new for a partition whose end it only knows as a lower bound below its
    position, instead of failing with DATA_LOSS ("beyond the log end"), and plans exactly once answered."""
    [topic] = topic_factory(1, partitions=1)
    produced = produce_raw(broker.bootstrap_servers, [topic], 300)
    tp = TopicPartitionId(topic, 0)
    end = produced[topic][0]
    source = reader(broker, topic, tmp_path, watermarkTimeout="0.5")
    source._known_ends[tp] = end + 50  # an end the fetch cannot answer at: as under a slow broker
    start = dict(to_doc({tp: end}))
    assert from_doc(source.latestOffset(start, source.getDefaultReadLimit())) == {tp: end}
    source.options.watermark_timeout = 10.0
    more = produce_raw(broker.bootstrap_servers, [topic], 40)[topic][0]
    # the listed end moved past the position: planned up to it unfetched, then exactly once it stays put
    planned = from_doc(source.latestOffset(start, source.getDefaultReadLimit()))[tp]
    assert end < planned <= more
    assert from_doc(source.latestOffset(dict(to_doc({tp: planned})), source.getDefaultReadLimit())) == {tp: more}
    source.stop()


def test_a_partition_a_reader_has_yet_to_reach_is_planned_to_its_listed_end_without_a_fetch(
    broker: LocalBroker, topic_factory: Callable[..., list[str]]
) -> None:
    """What keeps the query's cost flat on Tansu while records arrive: a caught-up reader's partitions are
    fetched (the exact end), those whose listed end is beyond the reader's position are not."""
    from streamwarden.kafka.admin import list_offsets_watermarks

    [topic] = topic_factory(1, partitions=2)
    produced = produce_raw(broker.bootstrap_servers, [topic], 400)
    consumer = metadata_consumer({"bootstrap.servers": broker.bootstrap_servers})
    try:
        partitions = list_partitions(consumer, topic)
        listed = list_offsets_watermarks(consumer, partitions)
        behind = watermarks_within(consumer, partitions, 10.0, reader_at={tp: listed[tp][1] - 1 for tp in partitions})
        assert {tp: (m.high, m.exact, m.asked) for tp, m in behind.items()} == {
            tp: (listed[tp][1], False, False) for tp in partitions}
        caught_up = watermarks_within(consumer, partitions, 10.0, reader_at={tp: listed[tp][1] for tp in partitions})
        assert {tp: (m.high, m.exact, m.asked) for tp, m in caught_up.items()} == {
            tp: (produced[topic][tp.partition], True, True) for tp in partitions}
    finally:
        consumer.close()


def test_a_silent_broker_plans_nothing_until_the_broker_timeout_then_fails_classified(
    own_broker: LocalBroker, tmp_path: Path
) -> None:
    from streamwarden.kafka.admin import create_topics

    topic = "frozen-s0"
    create_topics({"bootstrap.servers": own_broker.bootstrap_servers}, [topic], 2)
    produce_raw(own_broker.bootstrap_servers, [topic], 200)
    source = reader(own_broker, topic, tmp_path, watermarkTimeout="1", brokerTimeout="6")
    start = source.initialOffset()
    first = source.latestOffset(start, source.getDefaultReadLimit())
    answered = time.monotonic()
    assert first != start
    with frozen(own_broker):
        assert source.latestOffset(first, source.getDefaultReadLimit()) == first  # no answer: nothing new
        assert time.monotonic() - answered < 4  # one budget for the whole query, not one per partition
        while time.monotonic() - answered < 4.5:
            assert source.latestOffset(first, source.getDefaultReadLimit()) == first
        time.sleep(max(0.0, answered + 6.5 - time.monotonic()))
        with pytest.raises(EnvironmentFailure, match=r"has not answered the source's queries for \d+s "
                                                     r"\(brokerTimeout 6s\)"):
            source.latestOffset(first, source.getDefaultReadLimit())
    produce_raw(own_broker.bootstrap_servers, [topic], 20)
    resumed = reader(own_broker, topic, tmp_path, watermarkTimeout="10", brokerTimeout="6")
    planned = resumed.latestOffset(first, resumed.getDefaultReadLimit())  # up to the listed ends: a lower bound
    assert sum(from_doc(first).values()) < sum(from_doc(planned).values()) <= 220
    assert sum(from_doc(resumed.latestOffset(planned, resumed.getDefaultReadLimit())).values()) == 220
    source.stop()
    resumed.stop()
