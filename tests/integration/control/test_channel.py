"""The control topic on the real broker: commands published, read back from the beginning, bad ones skipped."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from streamwarden.control.channel import CommandReader, SkippedMessage, publish_commands
from streamwarden.control.commands import RestartSession
from streamwarden.failures import EnvironmentFailure
from streamwarden.kafka.admin import TopicPartitionId, fetch_high_watermarks, list_partitions, metadata_consumer
from streamwarden.local.broker import free_port
from streamwarden.settings import Settings, load_settings

if TYPE_CHECKING:
    from streamwarden.local.broker import LocalBroker

NOW = datetime.now(UTC)


def control_settings(bootstrap: str) -> Settings:
    return load_settings(bootstrap_servers=bootstrap, control_topic=f"control-{uuid.uuid4().hex[:8]}")


def command(request_id: str, site: str) -> RestartSession:
    return RestartSession(request_id, site, "test", issued_at=NOW, not_before=NOW, deadline=NOW + timedelta(minutes=5))


def read_until(reader: CommandReader, count: int, timeout: float = 10.0) -> list[RestartSession]:
    """Poll (never blocking) until ``count`` commands arrived or ``timeout`` passed."""
    got: list[RestartSession] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        got += reader.poll()
        time.sleep(0.05)
    return got


def keys(bootstrap: str, topic: str, count: int) -> list[bytes | None]:
    """The keys of the first ``count`` messages of the topic's partition 0, read with a plain consumer."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4().hex}",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        found: list[bytes | None] = []
        deadline = time.monotonic() + 10
        while len(found) < count and time.monotonic() < deadline:
            found += [m.key() for m in consumer.consume(num_messages=count, timeout=0.5) if m.error() is None]
        return found
    finally:
        consumer.close()


def log_end(bootstrap: str, topic: str) -> dict[TopicPartitionId, int]:
    consumer = metadata_consumer({"bootstrap.servers": bootstrap})
    try:
        partitions = list_partitions(consumer, topic)
        return {tp: high for tp, (_, high) in fetch_high_watermarks(consumer, partitions).items()}
    finally:
        consumer.close()


def test_published_commands_are_read_back_in_order_keyed_by_site(broker: LocalBroker) -> None:
    settings = control_settings(broker.bootstrap_servers)
    sent = [command("r-1", "sites-0"), command("r-2", "sites-1"), command("r-3", "*")]
    with CommandReader(settings) as reader:  # opened first: it creates the topic and reads from its start
        assert reader.poll() == []
        publish_commands(settings, sent)
        assert read_until(reader, 3) == sent
    assert log_end(broker.bootstrap_servers, settings.control_topic) == {
        TopicPartitionId(settings.control_topic, 0): 3}, "one partition, each command once"
    assert keys(broker.bootstrap_servers, settings.control_topic, 3) == [b"sites-0", b"sites-1", b"*"]
    with CommandReader(settings) as late:  # a reader opened later still sees every command
        assert read_until(late, 3) == sent


def test_a_malformed_or_unknown_message_is_skipped_and_reported_with_its_offset(broker: LocalBroker) -> None:
    settings = control_settings(broker.bootstrap_servers)
    skipped: list[SkippedMessage] = []
    with CommandReader(settings, on_skip=skipped.append) as reader:
        publish_commands(settings, [command("r-before", "sites-0")])
        raw = Producer({"bootstrap.servers": broker.bootstrap_servers})
        raw.produce(settings.control_topic, b"{not json", b"sites-0")
        raw.produce(settings.control_topic, b'{"type":"pause_site","version":1,"site":"sites-0"}', b"sites-0")
        assert raw.flush(10) == 0
        publish_commands(settings, [command("r-after", "sites-1")])
        got = read_until(reader, 2)
    assert [c.request_id for c in got] == ["r-before", "r-after"]
    assert [(s.topic, s.partition, s.offset) for s in skipped] == [
        (settings.control_topic, 0, 1), (settings.control_topic, 0, 2)]
    assert skipped[0].reason.startswith("malformed: not JSON")
    assert skipped[1].reason.startswith("unsupported: unknown command type 'pause_site'")
    assert str(skipped[0]).startswith(f"{settings.control_topic}[0]@1: malformed: not JSON")


def test_a_missing_topic_reads_as_empty_and_is_created_only_when_asked(broker: LocalBroker) -> None:
    settings = control_settings(broker.bootstrap_servers)
    with CommandReader(settings, create_topic=False) as reader:
        assert read_until(reader, 1, timeout=1.0) == []
    assert log_end(broker.bootstrap_servers, settings.control_topic) == {}
    with CommandReader(settings) as reader:
        assert read_until(reader, 1, timeout=1.0) == []
    assert log_end(broker.bootstrap_servers, settings.control_topic) == {
        TopicPartitionId(settings.control_topic, 0): 0}


def test_an_undelivered_command_is_an_environment_failure_naming_the_topic() -> None:
    settings = control_settings(f"127.0.0.1:{free_port()}")
    started = time.monotonic()
    with pytest.raises(EnvironmentFailure) as failure:
        publish_commands(settings, [command("r-1", "sites-0"), command("r-2", "sites-1")], timeout=1.0)
    assert time.monotonic() - started < 10
    assert failure.value.topic == settings.control_topic
    assert f"2 of 2 command(s) not delivered to the control topic {settings.control_topic}" in failure.value.message
    assert "Message timed out" in failure.value.message or "not delivered within 1s" in failure.value.message
