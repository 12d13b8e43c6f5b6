"""The fault drills of ``validate_output`` (tests/validation/test_fault_drills.py): one real session stream, then
copies of its output with one fault each, done as the fault itself would do it.

* :func:`run_session_stream`: simulated sessions and a few malformed messages on a real broker, read by the
  real ``streamwarden stream`` through two kill -9s (one between the two tables' commits, one of the whole
  process group in the middle of a run) and stopped cleanly; then the producers write on to one topic.
* :func:`copy_home`: the stream's home (output, checkpoint, run root) copied for one drill.
* the faults, each through the interface that makes it happen: delta-rs commits (a file removed from the log,
  a batch committed again by a second writer), the Spark checkpoint's offset and commit logs, the broker's
  DeleteTopics and CreateTopics.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.parquet as pq  # type: ignore[import-untyped, unused-ignore]
from confluent_kafka import Producer
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.transaction import AddAction, RemoveAction

from streamwarden.kafka.admin import create_topics, delete_topics
from streamwarden.local.producer import ProducerOptions, run_producer
from streamwarden.runfiles.checkpoint import commit_batches, offset_batches, read_offsets
from streamwarden.settings import load_settings
from streamwarden.tables.ranges import Interval, merge_intervals
from streamwarden.tables.statistics import file_statistics
from streamwarden.testing.faults import CHAOS_ENV
from support import StreamProcess, all_offsets, log_ends, stream_env

TopicPartition = tuple[str, int]
PARTITIONS = 3
CAP = 800  # offsets per micro-batch: the backlog takes two batches (the kill -9s in the first)
MIN_PARTITION = 120  # offsets of a partition that gets malformed messages
BURST = 6  # malformed messages in one partition
MALFORMED = (b"{not json", b'{"type":"update"}', b"\xff\xfe", b"[1, 2, 3]")


@dataclass(frozen=True)
class StreamRun:
    """What one real stream run left: its home, its environment, the topics and what Kafka holds."""

    home: Path
    env: dict[str, str]
    prefix: str
    main: tuple[str, ...]  # topics no drill touches in Kafka
    doomed: str  # deleted and recreated by the DATA_EXPIRED drill
    late: str  # written on after the stream stopped (unread: lag)
    ends: dict[str, dict[int, int]]  # Kafka's log ends when the stream stopped (all read)
    late_ends: dict[int, int]  # the late topic's log ends after the producers wrote on
    malformed: frozenset[tuple[str, int, int]]  # where the malformed messages landed
    exits: tuple[int, ...]  # the exit code of each run of the job


def run_session_stream(bootstrap: str, base: Path) -> StreamRun:
    """Sessions over four topics, two kill -9s, a clean stop, then more messages to the late topic."""
    prefix = f"drill{os.getpid()}x{time.monotonic_ns() % 10**6}"
    main, doomed, late = [f"{prefix}-0", f"{prefix}-1"], f"{prefix}-doomed-0", f"{prefix}-late-0"
    env = stream_env(base / "home", bootstrap, f"{prefix}-.*", pipeline="sessions",
                     max_offsets_per_trigger=str(CAP), session_buckets="8")
    job = StreamProcess(env, base / "stream.log")
    produce_sessions(bootstrap, prefix, sites=2, messages=1_000, seed=1)
    produce_sessions(bootstrap, f"{prefix}-doomed", sites=1, messages=250, seed=2)
    produce_sessions(bootstrap, f"{prefix}-late", sites=1, messages=250, seed=3)
    # malformed messages in the larger partitions of the main topics: a burst of BURST in one (a few percent of
    # it), one in each of up to three others (under 1% of each)
    sizes = log_ends(all_offsets(bootstrap, main))
    larger = sorted((t, p) for t, parts in sizes.items() for p, end in parts.items() if end >= MIN_PARTITION)
    assert len(larger) >= 3, sizes
    malformed = produce_malformed(bootstrap, [larger[0]] * BURST + larger[1:4])

    # kill -9 between the commit of session_rows and the commit of quarantine (the job kills itself there)
    job.start(**{CHAOS_ENV: "after_commit"})
    assert job.wait_exit(300) == -9, f"expected a SIGKILL death\n{job.log_tail()}"
    # kill -9 of the whole process group as soon as the restarted query runs (replaying the unfinished batch)
    job.start()
    job.wait_until(job.query_started, 300, "the restarted query")
    job.kill9()
    # a clean run to the end, then a graceful stop
    job.start()
    ends = log_ends(all_offsets(bootstrap, [*main, doomed, late]))
    assert all(len(ends.get(t, {})) == PARTITIONS for t in (*main, doomed, late)), ends
    job.wait_until(lambda: job.caught_up(ends) and job.checkpoint_settled(), 300, "every offset read")
    assert job.stop() == 0, job.log_tail()
    # the producers write on to the late topic; the stream is not running
    produce_sessions(bootstrap, f"{prefix}-late", sites=1, messages=60, seed=7)
    late_ends = log_ends(all_offsets(bootstrap, [late]))[late]
    return StreamRun(base / "home", env, prefix, tuple(main), doomed, late, ends, late_ends, frozenset(malformed),
                     tuple(job.runs))


def produce_sessions(bootstrap: str, prefix: str, *, sites: int, messages: int, seed: int) -> None:
    """Simulated sessions (snapshots of 4 rows, then updates) to ``<prefix>-<site>`` for each site; the same
    sessions, keys and so partitions every time for a seed (the run id is part of every session id)."""
    options = ProducerOptions(prefix=prefix, sites=sites, partitions=PARTITIONS, sessions_per_site=8,
                              rows_per_snapshot=4, updates_per_session=25, max_messages=messages, seed=seed,
                              run_id=f"drill{seed}")
    report = run_producer(load_settings(bootstrap_servers=bootstrap, topic_pattern=f"{prefix}-.*"), options)
    assert report.messages_sent == messages and not report.delivery_errors


def produce_malformed(bootstrap: str, partitions: Sequence[tuple[str, int]]) -> set[tuple[str, int, int]]:
    """One undecodable value to each entry of ``partitions`` (in order): where each landed."""
    placed: set[tuple[str, int, int]] = set()
    producer = Producer({"bootstrap.servers": bootstrap})

    def delivered(err: Any, msg: Any) -> None:
        assert err is None, err
        placed.add((msg.topic(), msg.partition(), msg.offset()))

    for i, (topic, partition) in enumerate(partitions):
        producer.produce(topic, key=b"bad%d" % i, value=MALFORMED[i % len(MALFORMED)], partition=partition,
                         on_delivery=delivered)
    producer.flush(30)
    assert len(placed) == len(partitions)
    return placed


def copy_home(run: StreamRun, target: Path) -> Path:
    """The stream's home (output, checkpoint, run root, state) copied to ``target``; the copy's home."""
    shutil.copytree(run.home, target, symlinks=True)
    return target


def drill_env(run: StreamRun, home: Path, **settings: str) -> dict[str, str]:
    """The ``STREAMWARDEN_*`` environment of a validation of the copy at ``home``."""
    env = {k: v for k, v in run.env.items() if k.startswith("STREAMWARDEN_")}
    env["STREAMWARDEN_HOME"] = str(home)
    env.update({f"STREAMWARDEN_{k.upper()}": v for k, v in settings.items()})
    return env


# -- reading what the stream wrote ----------------------------------------------------------------------------------


def table_root(home: Path, name: str) -> Path:
    return home / "output" / name


def version_actions(root: Path, version: int) -> list[dict[str, Any]]:
    """The actions of one commit of a Delta log, as written."""
    lines = (root / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def batch_commits(root: Path) -> Iterator[tuple[int, list[dict[str, Any]]]]:
    """(version, add actions) of every commit that added files, oldest first."""
    table = DeltaTable(str(root))
    for version in range(table.version() + 1):
        adds = [a["add"] for a in version_actions(root, version) if "add" in a]
        if adds:
            yield version, adds


def offsets_in(root: Path, relative: str) -> dict[TopicPartition, list[int]]:
    """The distinct offsets per topic-partition of one data file of a table."""
    data = pq.read_table(root / relative, columns=["topic", "partition", "offset"])
    found: dict[TopicPartition, set[int]] = {}
    for topic, partition, offset in zip(*(data.column(c).to_pylist() for c in ("topic", "partition", "offset")),
                                        strict=True):
        found.setdefault((topic, int(partition)), set()).add(int(offset))
    return {tp: sorted(offsets) for tp, offsets in found.items()}


def rows_in(root: Path, relative: str) -> dict[TopicPartition, int]:
    data = pq.read_table(root / relative, columns=["topic", "partition"])
    counted: dict[TopicPartition, int] = {}
    for topic, partition in zip(data.column("topic").to_pylist(), data.column("partition").to_pylist(), strict=True):
        counted[(topic, int(partition))] = counted.get((topic, int(partition)), 0) + 1
    return counted


def as_ranges(offsets: Sequence[int]) -> list[Interval]:
    """Sorted offsets as half-open ranges of consecutive offsets."""
    return merge_intervals((o, o + 1) for o in offsets)


def table_offsets(home: Path, name: str) -> dict[TopicPartition, set[int]]:
    """Every offset a table's newest version holds, per topic-partition."""
    data = pa.table(DeltaTable(str(table_root(home, name))).to_pyarrow_table(columns=["topic", "partition", "offset"]))
    found: dict[TopicPartition, set[int]] = {}
    for topic, partition, offset in zip(*(data.column(c).to_pylist() for c in ("topic", "partition", "offset")),
                                        strict=True):
        found.setdefault((topic, int(partition)), set()).add(int(offset))
    return found


# -- the faults -------------------------------------------------------------------------------------------------------


def remove_from_log(home: Path, name: str, relative: str) -> int:
    """A commit that removes one committed file from the table's log (the file stays on disk): the new version."""
    root = table_root(home, name)
    table = DeltaTable(str(root))
    [action] = [a for a in pa.table(table.get_add_actions(flatten=False)).to_pylist() if a["path"] == relative]
    remove = RemoveAction(relative, True, int(time.time() * 1000), action["size_bytes"], action["partition"])
    table.create_write_transaction([remove], mode="append", schema=table.schema(),
                                   partition_by=table.metadata().partition_columns)
    table.update_incremental()
    return table.version()


def commit_again(home: Path, name: str, adds: Sequence[dict[str, Any]], app_id: str, batch: int) -> int:
    """A second writer commits copies of a batch's files under its own app transaction ``(app_id, batch)``, the
    way an idempotent Delta writer records its batches: the new version."""
    root = table_root(home, name)
    table = DeltaTable(str(root))
    actions: list[AddAction | RemoveAction] = []
    for add in adds:
        source = root / add["path"]
        copy = root / "second-writer" / Path(add["path"]).parent / source.name
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, copy)
        actions.append(AddAction(copy.relative_to(root).as_posix(), copy.stat().st_size, add["partitionValues"],
                                 int(copy.stat().st_mtime * 1000), True, json.dumps(file_statistics(copy))))
    table.create_write_transaction(actions, mode="append", schema=table.schema(),
                                   partition_by=table.metadata().partition_columns,
                                   commit_properties=CommitProperties(app_transactions=[Transaction(app_id, batch)]))
    table.update_incremental()
    return table.version()


def checkpoint_past(checkpoint: Path, topic: str, partition: int, by: int) -> tuple[int, int]:
    """A next batch in the offset and commit logs that moves one partition ``by`` offsets on, as a checkpoint of
    another run or a hand-edited one would: (the batch id, the partition's new committed offset)."""
    last = commit_batches(checkpoint)[-1]
    assert offset_batches(checkpoint)[-1] == last, "the stream stopped with a batch in flight"
    lines = (checkpoint / "offsets" / str(last)).read_text().splitlines()
    document = read_offsets(checkpoint, last)
    assert document is not None
    document[topic][str(partition)] += by
    batch = last + 1
    (checkpoint / "offsets" / str(batch)).write_text("\n".join([*lines[:2], json.dumps(document), *lines[3:]]) + "\n")
    shutil.copy(checkpoint / "commits" / str(last), checkpoint / "commits" / str(batch))
    return batch, document[topic][str(partition)]


def recreate_topic(bootstrap: str, topic: str, messages: int) -> dict[int, int]:
    """DeleteTopics, CreateTopics (same name and partitions), then ``messages`` new records: the new log ends."""
    kafka = {"bootstrap.servers": bootstrap}
    delete_topics(kafka, [topic])
    create_topics(kafka, [topic], PARTITIONS)
    producer = Producer(kafka)
    for i in range(messages):
        producer.produce(topic, key=b"new%d" % i, value=b"{}", partition=i % PARTITIONS)
    producer.flush(30)
    ends = log_ends(all_offsets(bootstrap, [topic])).get(topic, {})
    return {p: ends.get(p, 0) for p in range(PARTITIONS)}


# -- the Data Docs ---------------------------------------------------------------------------------------------------


class _Tables(HTMLParser):
    """Every HTML table of a page (nested ones apart) as rows of cell texts, header rows included."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self._open: list[list[list[str]]] = []  # the tables being read, innermost last
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self._open.append([])
        elif tag == "tr" and self._open:
            self._open[-1].append([])
        elif tag in ("td", "th") and self._open and self._open[-1]:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._open and self._open[-1]:
            self._open[-1][-1].append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "table" and self._open:
            self.tables.append(self._open.pop())

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def unexpected_rows(page: Path) -> list[tuple[str, dict[str, list[str]]]]:
    """What a Data Docs page shows of the failing rows: per row of its tables of unexpected values, the value
    and the columns naming its rows (``topic``, ``partition``, ``offset``: one entry per row)."""
    parser = _Tables()
    parser.feed(page.read_text())
    shown = []
    for table in parser.tables:
        if not table or table[0][:2] not in (["Sampled Unexpected Values", "Count"], ["Unexpected Value", "Count"]):
            continue
        header = table[0]
        for row in table[1:]:
            if len(row) == len(header):
                shown.append((row[0], {name: [v.strip() for v in cell.split(",")]
                                       for name, cell in zip(header[2:], row[2:], strict=True)}))
    return shown



