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
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicPartition

from streamwarden.control.channel import ensure_control_topic, publish_commands
from streamwarden.control.commands import RestartSession
from streamwarden.kafka.admin import list_partitions, metadata_consumer
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
    """Settings on the test broker with this test's own topics, the control topic included."""
    return load_settings(bootstrap_servers=broker.bootstrap_servers, topic_pattern=f"{prefix}-.*",
                         control_topic=f"control-{prefix}")


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


def events_by_session(messages: list[Message]) -> dict[str, list[tuple[str, SessionEvent]]]:
    """(topic, event) of every message, decoded with the reference decoder, per session in offset order."""
    events: dict[str, list[tuple[str, SessionEvent]]] = defaultdict(list)
    for message in sorted(messages, key=lambda m: (m.topic(), m.partition(), m.offset())):
        event = decode(message.key(), message.value(), DEMO_SCHEMA)
        events[event.session_id].append((str(message.topic()), event))
    return events


def replay(events: list[tuple[str, SessionEvent]]) -> Table:
    table: Table = {}
    for _, event in events:
        table = apply_event(table, event)
    return table


def assert_expected_is_the_replay(expected: dict[str, Table] | None,
                                  events: dict[str, list[tuple[str, SessionEvent]]]) -> None:
    """``expected_tables`` holds exactly the sessions not ended, each equal to the replay of its events."""
    open_sessions = {s for s, e in events.items() if not isinstance(e[-1][1], EndEvent)}
    assert expected is not None and set(expected) == open_sessions
    assert all(expected[s] == replay(events[s]) for s in open_sessions)


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
                             kafka_config={"message.timeout.ms": "300", "linger.ms": "20"})
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


def test_a_restart_command_ends_a_sites_sessions_and_opens_new_ones_naming_the_request(broker: LocalBroker) -> None:
    prefix = unique_prefix()
    settings = settings_for(broker, prefix)
    topics = [f"{prefix}-{i}" for i in range(3)]
    now = datetime.now(UTC)
    ensure_control_topic(settings)
    publish_commands(settings, [
        RestartSession("r-old", topics[0], "too late", issued_at=now - timedelta(minutes=10),
                       not_before=now - timedelta(minutes=10), deadline=now - timedelta(minutes=5)),
        RestartSession("r-all", "*", "drill", issued_at=now, not_before=now + timedelta(seconds=0.3),
                       deadline=now + timedelta(minutes=5)),
        RestartSession("r-other", f"{prefix}x-0", "not ours", issued_at=now, not_before=now,
                       deadline=now + timedelta(minutes=5)),
    ])
    options = ProducerOptions(prefix=prefix, sites=3, partitions=2, sessions_per_site=3, rows_per_snapshot=4,
                              updates_per_session=1_000_000, rate=2000, duration=30, seed=3, track_expected=True,
                              ignore_restarts=(topics[2],), progress_interval=0.2)
    stop = threading.Event()
    lines: list[str] = []

    def progress(line: str) -> None:  # stop 0.3 s after both answering sites restarted
        lines.append(line)
        if line.startswith("restart r-all: ") and sum(seen.startswith("restart r-all: ") for seen in lines) == 2:
            threading.Timer(0.3, stop.set).start()

    report = run_producer(settings, options, progress=progress, stop=stop)
    assert report.stopped_by == "stop" and report.delivery_errors == report.undelivered == 0
    assert [(r["site"], r["request_id"], r["sessions_opened"]) for r in report.restarts] == [
        (topics[0], "r-all", 3), (topics[1], "r-all", 3)]
    assert sorted((s["site"], s["request_id"], s["why"]) for s in report.restarts_skipped) == [
        (topics[0], "r-old", "expired"), (topics[2], "r-all", "ignored")]
    assert not [line for line in lines if "r-other" in line], "commands for other topics pass unremarked"
    assert any(line.startswith("sent ") and "restarts acted on" in line for line in lines)

    events = events_by_session(consume_all(broker, topics, report.messages_sent))
    assert sum(len(e) for e in events.values()) == report.messages_sent
    for session_events in events.values():
        assert [e.seq for _, e in session_events] == list(range(len(session_events)))
    first: dict[str, SnapshotEvent] = {}
    for session_id, session_events in events.items():
        assert isinstance(session_events[0][1], SnapshotEvent)
        first[session_id] = session_events[0][1]
    for restart in report.restarts:
        site = restart["site"]
        mine = {s for s, e in events.items() if e[0][0] == site}
        new = {s for s in mine if first[s].restart_request == "r-all"}
        ended = {s for s in mine if isinstance(events[s][-1][1], EndEvent)}
        assert len(new) == 3 and ended == mine - new, "every old session ended, every new one names the request"
        assert restart["sessions_ended"] == len(ended) > 0
    ignoring = [e for e in events.values() if e[0][0] == topics[2]]
    assert len(ignoring) == 3 and not [e for e in ignoring if isinstance(e[-1][1], EndEvent)]
    assert all(first[e[0][1].session_id].restart_request is None for e in ignoring)
    assert_expected_is_the_replay(report.expected_tables, events)
    assert len(report.expected_tables or {}) == report.sessions_open == 9


def test_an_injected_gap_skips_exactly_one_seq_of_one_session(broker: LocalBroker) -> None:
    prefix = unique_prefix()
    settings = settings_for(broker, prefix)
    options = ProducerOptions(prefix=prefix, sites=2, partitions=2, sessions_per_site=2, rows_per_snapshot=3,
                              updates_per_session=40, max_messages=1500, seed=5, track_expected=True,
                              inject_gap=(1, 300), honour_restarts=False)
    lines: list[str] = []
    report = run_producer(settings, options, progress=lines.append)
    [gap] = report.gaps_injected
    assert gap["topic"] == f"{prefix}-1" and gap["seq"] > 0
    assert any(line.startswith(f"gap injected: {prefix}-1 session {gap['session_id']} seq {gap['seq']}")
               for line in lines)
    assert report.messages_sent == 1500

    events = events_by_session(consume_all(broker, options.topics, 1500))
    for session_id, session_events in events.items():
        seqs = [e.seq for _, e in session_events]
        missing = sorted(set(range(seqs[-1] + 1)) - set(seqs))
        assert missing == ([gap["seq"]] if session_id == gap["session_id"] else []), session_id
        assert seqs == sorted(seqs)
    assert_expected_is_the_replay(report.expected_tables, events)
    consumer = metadata_consumer(settings.kafka_client_config())
    try:
        assert list_partitions(consumer, settings.control_topic) == [], "no control topic without restarts"
    finally:
        consumer.close()


def test_restart_and_gap_options_validate() -> None:
    with pytest.raises(ValueError, match=r"ignore_restarts names sites-7: not among this producer's topics"):
        ProducerOptions(ignore_restarts=("sites-7",))
    with pytest.raises(ValueError, match=r"inject_gap site 3 is not a site index \(0..2\)"):
        ProducerOptions(inject_gap=(3, 10))
    with pytest.raises(ValueError, match="inject_gap after -1 messages"):
        ProducerOptions(inject_gap=(0, -1))
    with pytest.raises(ValueError, match="inject_gap needs updates_per_session above zero"):
        ProducerOptions(updates_per_session=0, inject_gap=(0, 10))


def test_restart_arguments() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    options = options_from_args(parser.parse_args(
        ["--prefix", "x", "--ignore-restarts", "x-1", "--ignore-restarts", "x-0,x-2"]))
    assert options.ignore_restarts == ("x-1", "x-0", "x-2") and options.honour_restarts
    assert not options_from_args(parser.parse_args(["--no-restarts"])).honour_restarts


def test_cli_produce_names_an_option_rule_broken_across_options_without_a_traceback() -> None:
    result = subprocess.run(
        [REPO_PYTHON, "-m", "streamwarden", "produce", "--prefix", "p", "--sites", "2", "--ignore-restarts", "q-0"],
        env={**os.environ, "STREAMWARDEN_TOPIC_PATTERN": "p-.*"}, capture_output=True, text=True, timeout=60,
        check=False)
    assert result.returncode == 2
    assert result.stderr.strip() == ("streamwarden produce: ignore_restarts names q-0: not among this producer's "
                                     "topics (p-0, p-1)")
