"""The collection-point simulator against a real broker, read back with a real consumer."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicPartition

from streamwarden.local.broker import free_port
from streamwarden.local.producer import (
    ProducerOptions,
    SessionSimulator,
    add_arguments,
    options_from_args,
    run_producer,
)
from streamwarden.settings import Settings, load_settings
from streamwarden.wire import (
    DEMO_SCHEMA,
    EndEvent,
    SessionEvent,
    SnapshotEvent,
    Table,
    TableSchema,
    apply_event,
    decode,
)

if TYPE_CHECKING:
    from streamwarden.local.broker import LocalBroker

REPO_PYTHON = sys.executable


def unique_prefix() -> str:
    return f"p{uuid.uuid4().hex[:8]}"


def settings_for(broker: LocalBroker, prefix: str) -> Settings:
    return load_settings(bootstrap_servers=broker.bootstrap_servers, topic_pattern=f"{prefix}-.*")


def consume_all(broker: LocalBroker, topics: list[str], expected: int) -> list[Message]:
    """Every message of ``topics`` from the beginning (up to ``expected``), in offset order per partition."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": f"t-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        metadata = consumer.list_topics(timeout=10)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING)
                         for topic in topics for p in metadata.topics[topic].partitions])
        messages: list[Message] = []
        deadline = time.monotonic() + 20
        while len(messages) < expected and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=1000, timeout=0.5):
                assert message.error() is None, message.error()
                messages.append(message)
        return messages
    finally:
        consumer.close()


def test_simulator_is_deterministic_and_sessions_are_well_formed() -> None:
    options = ProducerOptions(sites=2, sessions_per_site=3, rows_per_snapshot=4, updates_per_session=10)
    now = datetime.now(UTC)
    first, second = SessionSimulator(options, "run"), SessionSimulator(options, "run")
    events = [first.next_event(now) for _ in range(500)]
    assert events == [second.next_event(now) for _ in range(500)]
    by_session: dict[str, list[SessionEvent]] = defaultdict(list)
    for topic, key, event in events:
        assert key == event.session_id.encode()
        assert topic == f"sites-{event.session_id[1]}"
        by_session[event.session_id].append(event)
    for session_events in by_session.values():
        assert [e.seq for e in session_events] == list(range(len(session_events)))
        assert isinstance(session_events[0], SnapshotEvent)
        assert len(session_events[0].rows) == 4
        ends = [i for i, e in enumerate(session_events) if isinstance(e, EndEvent)]
        assert ends in ([], [11])  # snapshot, 10 row messages, end
    assert len({e.type for _, _, e in events}) == 4
    assert len({session_id[:2] for session_id in by_session}) == 2  # both sites


def test_producer_publishes_ordered_sessions_and_tracks_expected_tables(broker: LocalBroker) -> None:
    prefix = unique_prefix()
    options = ProducerOptions(prefix=prefix, sites=2, partitions=3, sessions_per_site=4, rows_per_snapshot=5,
                              updates_per_session=30, delete_ratio=0.2, max_messages=3000, seed=7,
                              track_expected=True, progress_interval=0.05)
    lines: list[str] = []
    report = run_producer(settings_for(broker, prefix), options, progress=lines.append)
    assert report.messages_sent == 3000
    assert report.delivery_errors == report.undelivered == 0
    assert report.stopped_by == "max_messages"
    assert report.sessions_ended > 0
    assert report.run_id.startswith("7.")
    assert lines[-1].startswith("done (max_messages): sent 3,000 messages")

    messages = consume_all(broker, options.topics, 3000)
    assert len(messages) == 3000
    assert {t: sum(m.topic() == t for m in messages) for t in options.topics} == report.topics
    partitions: dict[str, set[tuple[str | None, int | None]]] = defaultdict(set)
    events: dict[str, list[SessionEvent]] = defaultdict(list)
    for message in sorted(messages, key=lambda m: (m.topic(), m.partition(), m.offset())):
        event = decode(message.key(), message.value(), DEMO_SCHEMA)
        partitions[event.session_id].add((message.topic(), message.partition()))
        events[event.session_id].append(event)
    assert report.sessions_started == len(events)
    assert all(len(where) == 1 for where in partitions.values())
    expected = report.expected_tables
    assert expected is not None
    assert len(expected) == report.sessions_open == 8
    for session_id, session_events in events.items():
        assert isinstance(session_events[0], SnapshotEvent)
        assert [e.seq for e in session_events] == list(range(len(session_events)))
        table: Table = {}
        for event in session_events:
            table = apply_event(table, event)
        if isinstance(session_events[-1], EndEvent):
            assert session_id not in expected
        else:
            assert expected[session_id] == table


def test_rate_limit_and_stop_event(broker: LocalBroker) -> None:
    prefix = unique_prefix()
    stop = threading.Event()
    timer = threading.Timer(1.0, stop.set)
    timer.start()
    try:
        report = run_producer(settings_for(broker, prefix), ProducerOptions(prefix=prefix, rate=2000),
                              stop=stop)
    finally:
        timer.cancel()
    assert report.stopped_by == "stop"
    assert report.expected_tables is None
    assert 1500 <= report.messages_sent <= 2600
    assert "expected_tables" not in report.to_json()


def test_duration_and_padding(broker: LocalBroker) -> None:
    prefix = unique_prefix()
    options = ProducerOptions(prefix=prefix, sites=1, rate=500, duration=0.5, pad_to=2048)
    report = run_producer(settings_for(broker, prefix), options)
    assert report.stopped_by == "duration"
    messages = consume_all(broker, options.topics, report.messages_sent)
    assert len(messages) == report.messages_sent > 0
    assert all(len(m.value() or b"") >= 2048 for m in messages)


def test_delivery_errors_are_counted(broker: LocalBroker) -> None:
    settings = load_settings(bootstrap_servers=f"127.0.0.1:{free_port()}",
                             kafka_config={"message.timeout.ms": "300"})
    report = run_producer(settings, ProducerOptions(max_messages=50, create_topics=False))
    assert report.messages_sent == 0
    assert report.delivery_errors == 50
    assert report.error_samples and "sites-" in report.error_samples[0]


def test_arguments() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert options_from_args(parser.parse_args([])) == ProducerOptions()
    options = options_from_args(parser.parse_args(
        ["--prefix", "x", "--sites", "2", "--rows", "0", "--rate", "10", "--max-messages", "5",
         "--no-create-topics", "--track-expected", "--schema", '{"a": "long"}', "--delete-ratio", "0.1"]))
    assert options == ProducerOptions(prefix="x", sites=2, rows_per_snapshot=0, rate=10, max_messages=5,
                                      create_topics=False, track_expected=True, delete_ratio=0.1,
                                      schema=TableSchema.parse({"a": "long"}))


@pytest.mark.parametrize(("argv", "complaint"), [
    (["--sites", "0"], "above zero"),
    (["--delete-ratio", "0.9"], "between 0 and 0.5"),
    (["--schema", '{"a": "int"}'], "column 'a': unknown type 'int'"),
    (["--rate", "fast"], "could not convert"),
])
def test_bad_arguments_are_named(argv: list[str], complaint: str, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(argv)
    assert complaint in capsys.readouterr().err


def test_options_validate() -> None:
    with pytest.raises(ValueError, match="sites"):
        ProducerOptions(sites=0)
    with pytest.raises(ValueError, match="not a valid Kafka topic name"):
        ProducerOptions(prefix="bad/prefix")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_flushes_and_reports(broker: LocalBroker, signum: signal.Signals) -> None:
    prefix = unique_prefix()
    script = (
        "import json; from streamwarden.settings import load_settings; "
        "from streamwarden.local.producer import ProducerOptions, run_producer; "
        f"o = ProducerOptions(prefix={prefix!r}, rate=1000, progress_interval=0.2); "
        "r = run_producer(load_settings(), o, "
        "progress=lambda line: print(line, flush=True)); print(json.dumps(r.to_json()), flush=True)"
    )
    env = {**os.environ, "STREAMWARDEN_BOOTSTRAP_SERVERS": broker.bootstrap_servers,
           "STREAMWARDEN_TOPIC_PATTERN": f"{prefix}-.*"}
    process = subprocess.Popen([REPO_PYTHON, "-c", script], env=env, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    assert process.stdout.readline().startswith("producing to")
    assert process.stdout.readline().startswith("sent ")  # in the produce loop
    process.send_signal(signum)
    out, _ = process.communicate(timeout=30)
    assert process.returncode == 0
    report = json.loads(out.strip().splitlines()[-1])
    assert report["stopped_by"] == "interrupt"
    assert report["delivery_errors"] == 0


def test_cli_produce(broker: LocalBroker) -> None:
    prefix = unique_prefix()
    env = {**os.environ, "STREAMWARDEN_BOOTSTRAP_SERVERS": broker.bootstrap_servers,
           "STREAMWARDEN_TOPIC_PATTERN": f"{prefix}-.*"}
    result = subprocess.run(
        [REPO_PYTHON, "-m", "streamwarden", "produce", "--max-messages", "500", "--prefix", prefix,
         "--sites", "2", "--progress-interval", "0.01"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0].startswith(f"producing to {prefix}-0, {prefix}-1")
    assert any(line.startswith("done (max_messages)") for line in lines)
    report = json.loads(lines[-1])
    assert report["messages_sent"] == 500
    assert sum(report["topics"].values()) == 500
