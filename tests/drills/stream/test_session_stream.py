"""Session reconstruction end to end: real broker, the real job process, real Spark, real files."""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pyarrow.compute as pc
import pytest
from confluent_kafka import Producer
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from fixtures import REPO, TESTS
from fixtures.sessions import (
    ALL_TRAFFIC,
    CLEAN,
    DAMAGED_SESSIONS,
    MALFORMED,
    MAX_MESSAGE_BYTES,
    RESYNC_DEAD,
    RESYNC_TABLES,
    SCHEMA,
    Message,
    good,
    replay,
    snapshot,
    update,
)
from fixtures.stream_process import StreamProcess, all_offsets, assert_offsets_accounted, log_ends, stream_env
from streamwarden.failures import EXIT_CODES, FailureClass
from streamwarden.local.broker import LocalBroker
from streamwarden.local.producer import ProducerOptions, run_producer
from streamwarden.runfiles.checkpoint import commit_batches
from streamwarden.runfiles.failure_file import read_failure
from streamwarden.runfiles.handler_pin import HANDLER_FILE, SLOT_CODEC, SLOT_EXPIRY, fingerprint
from streamwarden.settings import load_settings
from streamwarden.stream.sessions.session_store import SlotCodec
from streamwarden.stream.sessions.table_handler import TableReconstruction
from streamwarden.tables.location import QUARANTINE, SESSION_ROWS
from streamwarden.testing.faults import CHAOS_ENV
from streamwarden.testing.replay import final_tables, offsets_by_table, read_table
from streamwarden.wire import ColumnType, SessionEvent, TableSchema

pytestmark = pytest.mark.slow
HERE = Path(__file__).resolve().parent


class EventCounter:
    """A handler written here, not in Streamwarden: counts each session's events, and gives a timestamp column
    as the wire's ISO-8601 text (the job converts it)."""

    state_version: ClassVar[int] = 1
    state_schema: ClassVar[str] = "decimal count"

    def output_columns(self, schema: TableSchema) -> Sequence[tuple[str, ColumnType]]:
        return [("events_seen", "long"), ("last_type", "string"), ("seen_at", "timestamp")]

    def initial_state(self) -> int:
        return 0

    def on_event(self, state: int, event: SessionEvent) -> tuple[int, list[dict[str, Any]]]:
        return state + 1, [{"events_seen": state + 1, "last_type": event.type, "seen_at": event.ts.isoformat()}]

    def encode_state(self, state: int) -> bytes:
        return str(state).encode()

    def decode_state(self, data: bytes) -> int:
        return int(data)


def produce_messages(bootstrap: str, topic: str, messages: list[Message]) -> dict[tuple[int, int], Message]:
    """Send crafted messages in order; returns (partition, offset) -> message."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    placed: dict[tuple[int, int], Message] = {}
    for message in messages:
        def delivered(err: Any, msg: Any, message: Message = message) -> None:
            assert err is None, err
            placed[(msg.partition(), msg.offset())] = message

        producer.produce(topic, key=message.key, value=message.value, on_delivery=delivered)
        producer.flush(10)  # one at a time: keeps each session's order across retries
    return placed


def dead_letters(output: Path) -> dict[str, list[str]]:
    table = read_table(output / QUARANTINE).sort_by([("topic", "ascending"), ("partition", "ascending"),
                                                     ("offset", "ascending")])
    by_key: dict[str, list[str]] = {}
    for key, error_class in zip(table.column("key").to_pylist(), table.column("error_class").to_pylist(),
                                strict=True):
        by_key.setdefault((key or b"").decode(errors="replace"), []).append(error_class)
    return by_key


BIG_WORKLOAD = 350_000


@pytest.fixture(scope="module")
def big_workload(broker: LocalBroker) -> dict[str, Any]:
    """350k snapshot/update messages from 210 concurrent sessions over 3 topics x 4 partitions (the exactly-once
    drill of raw offsets, ``test_stream_exactly_once``, reads a million)."""
    options = ProducerOptions(prefix=f"big{os.getpid()}", sites=3, partitions=4, sessions_per_site=70,
                              rows_per_snapshot=40, updates_per_session=3000, max_messages=BIG_WORKLOAD,
                              track_expected=True, seed=11)
    report = run_producer(load_settings(bootstrap_servers=broker.bootstrap_servers), options)
    assert report.messages_sent == BIG_WORKLOAD and not report.delivery_errors
    assert report.expected_tables is not None and len(report.expected_tables) >= 200
    return {"pattern": f"{options.prefix}-.*", "topics": options.topics, "expected": report.expected_tables}


def test_350k_messages_in_large_batches_through_kill_9_and_spilled_sorts_rebuild_every_table_cell_for_cell(
    broker: LocalBroker, big_workload: dict[str, Any], tmp_path: Path, spark: SparkSession
) -> None:
    # Spark spills every 10k rows of a sort, so each session's events come back from spill files; the job dies
    # twice at a commit and once at a random point, and the state comes back from the checkpoint each time
    conf = {"spark.shuffle.spill.numElementsForceSpillThreshold": "10000"}
    env = stream_env(tmp_path, broker.bootstrap_servers, big_workload["pattern"], pipeline="sessions",
                     max_offsets_per_trigger="100000", spark_conf=json.dumps(conf))
    job = StreamProcess(env, tmp_path / "stream.log")
    checkpoint = job.settings.checkpoint_location
    expected_offsets = all_offsets(broker.bootstrap_servers, big_workload["topics"])
    ends = log_ends(expected_offsets)

    # kill -9 between the two tables' commits (session_rows done, quarantine not), then before one; the point
    # does not depend on the batch's size, so these batches are small
    for point in ("after_commit", "before_commit"):
        job.start(**{CHAOS_ENV: point, "STREAMWARDEN_MAX_OFFSETS_PER_TRIGGER": "10000"})
        assert job.wait_exit(600) == -9, f"{point}: expected a SIGKILL death\n{job.log_tail()}"
    job.start()
    # kill -9 mid-run: state must come back from the checkpoint with no false gap
    done = len(commit_batches(checkpoint))
    job.wait_until(lambda: len(commit_batches(checkpoint)) > done, 600, "a committed batch")
    time.sleep(random.Random(7).uniform(0.5, 5.0))
    job.kill9()
    job.start()
    job.wait_until(lambda: job.caught_up(ends), 900, "all offsets processed")
    assert job.stop() == 0, job.log_tail()

    output = job.settings.root("output")
    assert_offsets_accounted(output, expected_offsets)
    assert not (output / QUARANTINE).exists() or read_table(output / QUARANTINE).num_rows == 0
    got = final_tables(read_table(output / SESSION_ROWS), SCHEMA)
    expected = big_workload["expected"]
    assert set(got) == set(expected)
    assert got == expected
    sizes = [sum(end - start for parts in json.loads(commit["streamwarden.ranges"]).values()
                 for start, end in parts.values())
             for commit in DeltaTable(str(output / SESSION_ROWS)).history() if "streamwarden.ranges" in commit]
    assert max(sizes) >= 100_000, "large batches: at least 100k records per trigger"
    # a new checkpoint pins the slot codec and the store's own expiry, and holds every open session in slots
    # of that codec (Spark's state reader shows them)
    pinned = json.loads((checkpoint / HANDLER_FILE).read_text())
    assert (pinned["slot_codec"], pinned["slot_expiry"]) == (SLOT_CODEC, SLOT_EXPIRY)
    codec = SlotCodec(pinned["slot_codec"])
    assert {s for blob in slot_blobs(spark, checkpoint) for s in codec.decode(blob)} == set(expected)


@pytest.fixture(scope="module")
def damaged_topic(broker: LocalBroker, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from streamwarden.kafka.admin import create_topics

    topic = f"damaged{os.getpid()}"
    create_topics({"bootstrap.servers": broker.bootstrap_servers}, [topic], partitions=2)
    placed = produce_messages(broker.bootstrap_servers, topic, ALL_TRAFFIC)
    return {"topic": topic, "placed": placed}


def run_damaged(broker: LocalBroker, topic: str, home: Path, **settings: str) -> StreamProcess:
    env = stream_env(home, broker.bootstrap_servers, topic, pipeline="sessions",
                     max_message_bytes=str(MAX_MESSAGE_BYTES), **settings)
    return StreamProcess(env, home / "stream.log")


def test_resync_skips_exactly_the_damaged_interval_and_accounts_every_offset(
    broker: LocalBroker, damaged_topic: dict[str, Any], tmp_path: Path
) -> None:
    topic = damaged_topic["topic"]
    job = run_damaged(broker, topic, tmp_path, integrity_tier="strict", on_gap="resync")
    job.start()
    job.wait_until(lambda: job.caught_up({topic: {0: 0, 1: 0}}) and len(job.committed().get(topic, {})) == 2
                   and job.checkpoint_settled() and (job.settings.root("output") / SESSION_ROWS).exists(),
                   300, "the damaged topic")
    expected = {(topic, p, o) for p, o in damaged_topic["placed"]}
    job.wait_until(lambda: _accounted(job, expected), 120, "every offset accounted")
    assert job.stop() == 0, job.log_tail()

    output = job.settings.root("output")
    assert_offsets_accounted(output, expected)
    assert final_tables(read_table(output / SESSION_ROWS), SCHEMA) == RESYNC_TABLES
    dead = dead_letters(output)
    for session, classes in RESYNC_DEAD.items():
        assert dead[session] == classes
    malformed = sorted(c for key, classes in dead.items() if key not in RESYNC_DEAD for c in classes)
    assert malformed == sorted(str(m.malformed) for m in MALFORMED)
    messages = read_table(output / QUARANTINE).column("error_message").to_pylist()
    assert any("expected seq 2, saw 3" in m and "until its next snapshot" in m for m in messages)
    rows = read_table(output / SESSION_ROWS).filter(pc.is_valid(pc.field("boundary"))).to_pylist()
    boundaries = {(r["session_id"], r["seq"], r["boundary"]) for r in rows}
    assert boundaries == {("A", 0, "start"), ("B", 0, "start"), ("B", 5, "resync"), ("C", 0, "start"),
                          ("C", 3, "resync"), ("D", 1, "resync"), ("E", 0, "start"), ("E", 1, "end")}


def _accounted(job: StreamProcess, expected: set[tuple[str, int, int]]) -> bool:
    output = job.settings.root("output")
    if not (output / SESSION_ROWS).exists() or not (output / QUARANTINE).exists():
        return False
    found = offsets_by_table(output, [SESSION_ROWS, QUARANTINE])
    return found[SESSION_ROWS] | found[QUARANTINE] == expected


def test_tier_none_applies_what_arrives(broker: LocalBroker, damaged_topic: dict[str, Any], tmp_path: Path) -> None:
    topic = damaged_topic["topic"]
    job = run_damaged(broker, topic, tmp_path, integrity_tier="none")
    job.start()
    expected = {(topic, p, o) for p, o in damaged_topic["placed"]}
    job.wait_until(lambda: _accounted(job, expected), 300, "every offset accounted")
    assert job.stop() == 0, job.log_tail()
    assert final_tables(read_table(job.settings.root("output") / SESSION_ROWS), SCHEMA) == replay(ALL_TRAFFIC)


def test_strict_fails_with_the_named_reason(broker: LocalBroker, damaged_topic: dict[str, Any],
                                            tmp_path: Path) -> None:
    job = run_damaged(broker, damaged_topic["topic"], tmp_path, integrity_tier="strict", on_gap="fail")
    job.start()
    assert job.wait_exit(300) == EXIT_CODES[FailureClass.INTEGRITY], job.log_tail()
    failure = read_failure(job.settings.run_paths.failure)
    assert failure is not None and failure.failure_class is FailureClass.INTEGRITY
    session = failure.details["session_id"]
    reason, expected_seq, seen_seq = DAMAGED_SESSIONS[session]
    assert failure.details == {"session_id": session, "reason": reason, "expected_seq": expected_seq,
                               "seen_seq": seen_seq}
    assert failure.topic == damaged_topic["topic"] and failure.offset is not None
    assert damaged_topic["placed"][(failure.partition, failure.offset)].key == session.encode()


def test_strict_malformed_policy_fail_stops_with_malformed(
    broker: LocalBroker, topic_factory: Callable[..., list[str]], tmp_path: Path
) -> None:
    (topic,) = topic_factory(1, partitions=1)
    placed = produce_messages(broker.bootstrap_servers, topic, CLEAN + MALFORMED[:1])
    job = run_damaged(broker, topic, tmp_path, integrity_tier="strict", malformed_policy="fail")
    job.start()
    assert job.wait_exit(300) == EXIT_CODES[FailureClass.MALFORMED], job.log_tail()
    failure = read_failure(job.settings.run_paths.failure)
    assert failure is not None and failure.failure_class is FailureClass.MALFORMED
    assert (failure.topic, failure.partition, failure.offset) == (topic, 0, len(CLEAN))
    assert placed[(0, len(CLEAN))].malformed == "INVALID_JSON"


def test_a_handler_from_this_file_runs_through_the_same_job_and_is_pinned(
    broker: LocalBroker, topic_factory: Callable[..., list[str]], tmp_path: Path
) -> None:
    (topic,) = topic_factory(1, partitions=2)
    placed = produce_messages(broker.bootstrap_servers, topic, CLEAN)
    env = stream_env(tmp_path, broker.bootstrap_servers, topic, pipeline="sessions",
                     session_handler="test_session_stream:EventCounter")
    paths = [HERE, TESTS, REPO / "bench"]  # this module, the fixtures it imports, the replay
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [*map(str, paths), env.get("PYTHONPATH")]))
    job = StreamProcess(env, tmp_path / "stream.log")
    job.start()
    job.wait_until(lambda: (job.settings.root("output") / SESSION_ROWS).exists()
                   and read_table(job.settings.root("output") / SESSION_ROWS).num_rows == len(placed),
                   300, "the custom handler's rows")
    assert job.stop() == 0, job.log_tail()
    rows = read_table(job.settings.root("output") / SESSION_ROWS).sort_by("seq")
    assert rows.column("events_seen").to_pylist() == [1, 2, 3, 4]
    assert rows.column("last_type").to_pylist() == ["snapshot", "update", "update", "delete"]
    assert rows.column("seen_at").to_pylist() == rows.column("event_ts").to_pylist()
    assert pc.all(pc.equal(rows.column("session_id"), "A")).as_py()

    job.env["STREAMWARDEN_SESSION_HANDLER"] = "streamwarden.stream.sessions.table_handler:TableReconstruction"
    job.start()
    assert job.wait_exit(300) == EXIT_CODES[FailureClass.CONFIG], job.log_tail()
    failure = read_failure(job.settings.run_paths.failure)
    assert failure is not None and "EventCounter" in failure.message and "refusing to start" in failure.message


def test_a_checkpoint_keeps_its_state_partitions_buckets_and_layout_when_the_settings_change(
    broker: LocalBroker, topic_factory: Callable[..., list[str]], tmp_path: Path
) -> None:
    # the defaults are one state partition per core, sessions in slots and changelog checkpoints of the state:
    # an upgraded job (its checkpoint one entry per session, snapshots only), or one moved to another machine,
    # must still find every session's state where the checkpoint put it (Spark restores the partitions from
    # the offset log and reads either kind of state checkpoint; the buckets, slots and bucket labels are pinned
    # with the handler: with the buckets unset, the 16 of 2 partitions would misplace the updates, and so would
    # labels balanced for 2 partitions instead of 3, a strict failure)
    (topic,) = topic_factory(1, partitions=2)
    sessions = [f"S{i}" for i in range(24)]
    first = [good(snapshot(s, 0, {"r1": {"qty": i}})) for i, s in enumerate(sessions)]
    then = [good(update(s, 1, "r1", qty=100 + i)) for i, s in enumerate(sessions)]
    placed = set(produce_messages(broker.bootstrap_servers, topic, first))
    snapshots_only = {"spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "false"}
    job = run_damaged(broker, topic, tmp_path, integrity_tier="strict", on_gap="fail", shuffle_partitions="3",
                      session_buckets="5", session_slots="0", spark_conf=json.dumps(snapshots_only))
    job.start()
    job.wait_until(lambda: _accounted(job, {(topic, *at) for at in placed}), 300, "the snapshots")
    assert job.stop() == 0, job.log_tail()

    placed |= set(produce_messages(broker.bootstrap_servers, topic, then))
    job.env["STREAMWARDEN_SHUFFLE_PARTITIONS"] = "2"
    del job.env["STREAMWARDEN_SESSION_BUCKETS"], job.env["STREAMWARDEN_SESSION_SLOTS"]
    del job.env["STREAMWARDEN_SPARK_CONF"]
    job.start()
    job.wait_until(lambda: _accounted(job, {(topic, *at) for at in placed}), 300, "the updates")
    assert job.stop() == 0, job.log_tail()
    assert not dead_letters(job.settings.root("output"))
    assert final_tables(read_table(job.settings.root("output") / SESSION_ROWS), SCHEMA) == replay(first + then)
    state = job.settings.checkpoint_location / "state" / "0"
    assert sorted(p.name for p in state.iterdir() if p.name.isdigit()) == ["0", "1", "2"]
    kinds = {p.suffix for p in state.rglob("*") if p.suffix in {".zip", ".changelog"}}
    assert kinds == {".zip", ".changelog"}  # snapshots of the first run, changelogs of the second
    pinned = json.loads((job.settings.checkpoint_location / HANDLER_FILE).read_text())
    assert pinned["session_buckets"] == 5 and "session_slots" not in pinned
    assert pinned["bucket_partitions"] == 3  # the labels balanced for the partitions Spark restored


def slot_blobs(spark: SparkSession, checkpoint: Path) -> list[bytes]:
    """The slots the checkpoint holds at its last batch, read with Spark's state data source (its RocksDB
    loader reports to the state store coordinator, which the session has once its streams manager is up)."""
    assert spark.streams.active == []
    rows = spark.read.format("statestore").option("path", str(checkpoint)).option("stateVarName", "slots").load()
    values = [r["user_map_value"].asDict() for r in rows.collect()]  # under Spark's TTL: {value: ..., ttl...}
    return [bytes(v["value"]["sessions"] if "value" in v else v["sessions"]) for v in values]


def test_a_checkpoint_pinned_before_slot_codecs_keeps_plain_slots_across_restarts(
    broker: LocalBroker, topic_factory: Callable[..., list[str]], tmp_path: Path, spark: SparkSession
) -> None:
    # a checkpoint started before slots were compressed (its pinned layout names no slot_codec) goes on reading
    # and writing plain slots, with Spark's TTL (a new checkpoint's codec: the 350k test); the updates after the
    # restart need the states the first run stored, and Spark's state reader shows how the slots are held
    (topic,) = topic_factory(1, partitions=2)
    sessions = [f"P{i}" for i in range(40)]
    first = [good(snapshot(s, 0, {"r1": {"qty": i}, "r2": {"qty": -i}})) for i, s in enumerate(sessions)]
    then = [good(update(s, 1, "r1", qty=100 + i)) for i, s in enumerate(sessions)]
    job = run_damaged(broker, topic, tmp_path, integrity_tier="strict", on_gap="fail", session_buckets="4",
                      session_slots="8")
    checkpoint = job.settings.checkpoint_location
    checkpoint.mkdir(parents=True)
    (checkpoint / HANDLER_FILE).write_text(json.dumps(fingerprint(TableReconstruction(), 4, 8)))
    placed = set(produce_messages(broker.bootstrap_servers, topic, first))
    job.start()
    job.wait_until(lambda: _accounted(job, {(topic, *at) for at in placed}), 300, "the snapshots")
    assert job.stop() == 0, job.log_tail()
    placed |= set(produce_messages(broker.bootstrap_servers, topic, then))
    job.start()
    job.wait_until(lambda: _accounted(job, {(topic, *at) for at in placed}), 300, "the updates")
    assert job.stop() == 0, job.log_tail()

    assert not dead_letters(job.settings.root("output"))
    assert final_tables(read_table(job.settings.root("output") / SESSION_ROWS), SCHEMA) == replay(first + then)
    pinned = json.loads((checkpoint / HANDLER_FILE).read_text())
    assert "slot_codec" not in pinned and "slot_expiry" not in pinned
    codec = SlotCodec("")
    held = slot_blobs(spark, checkpoint)
    assert held and {s for blob in held for s in codec.decode(blob)} == set(sessions)


LAYOUTS = {"one-slot": {"session_buckets": "1", "session_slots": "1"}, "default-slots": {}}
"""The two state layouts of the timeout drill: one slot (A and B share the state entry B rewrites) and the default
layout (sessions spread over many slots)."""
ALIVE = [chr(c) for c in range(ord("B"), ord("I"))]


@dataclass(frozen=True)
class TimeoutRun:
    """One layout's job of the timeout drill: its exit code on the stop, and where its output is."""

    exit_code: int
    log_tail: str
    output: Path


@pytest.fixture(scope="module")
def timeout_runs(broker: LocalBroker, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, TimeoutRun],
                                                                                         list[Message]]:
    """A goes silent; B..H are written on every 5 s for 40 s, so that their state must outlive their first write by
    more than the 20 s timeout. Both layouts run at once, each a job of its own reading the same topic (the 40 s of
    writing are paid once): each layout's run, and what was written to B."""
    from streamwarden.kafka.admin import create_topics

    topic = f"timeout{os.getpid()}"
    create_topics({"bootstrap.servers": broker.bootstrap_servers}, [topic], partitions=1)
    home = tmp_path_factory.mktemp("timeout")
    placed: dict[tuple[int, int], Message] = {}
    jobs = {name: run_damaged(broker, topic, home / name, integrity_tier="strict", on_gap="resync",
                              session_timeout="20s", **layout) for name, layout in LAYOUTS.items()}

    def produce_and_wait(messages: list[Message], timeout: float = 120) -> None:
        placed.update(produce_messages(broker.bootstrap_servers, topic, messages))
        for name, job in jobs.items():
            job.wait_until(lambda job=job: _accounted(job, {(topic, *at) for at in placed}), timeout,
                           f"the messages accounted ({name})")

    for name, job in jobs.items():
        (home / name).mkdir()
        job.start()
    try:
        produce_and_wait([good(snapshot("Z", 0, {"r1": {"qty": 1}}))], 300)  # the first batch pays the start-up
        produce_and_wait([good(snapshot(s, 0, {"r1": {"qty": 1}})) for s in ["A", *ALIVE]])
        written = [good(snapshot("B", 0, {"r1": {"qty": 1}}))]
        for seq in range(1, 9):
            time.sleep(5)
            if seq == 6:
                produce_and_wait([good(update("A", 1, "r1", qty=2))])
            produce_and_wait([good(update(s, seq, "r1", qty=seq + 1)) for s in ALIVE])
            written.append(good(update("B", seq, "r1", qty=seq + 1)))
    finally:
        codes = {name: job.stop() for name, job in jobs.items()}
    runs = {name: TimeoutRun(codes[name], job.log_tail(), job.settings.root("output")) for name, job in jobs.items()}
    return runs, written


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_a_session_silent_past_the_timeout_is_released_while_those_written_on_keep_their_state(
    timeout_runs: tuple[dict[str, TimeoutRun], list[Message]], layout: str
) -> None:
    runs, written = timeout_runs
    run = runs[layout]
    assert run.exit_code == 0, run.log_tail
    assert dead_letters(run.output) == {"A": ["UPDATE_BEFORE_SNAPSHOT"]}
    tables = final_tables(read_table(run.output / SESSION_ROWS), SCHEMA)
    assert {s: tables[s] for s in ALIVE} == {s: replay(written)["B"] for s in ALIVE}
