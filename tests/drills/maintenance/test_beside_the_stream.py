"""Maintenance beside the real, live stream: compaction under a 1 s trigger, and kill -9 on either side.

The stream (records pipeline, one row per offset) keeps consuming a producer that keeps producing; a
reader opens every new version of the table and checks it is whole (:mod:`version_reader`), and reaches every
offset; at rest every offset is in the table exactly once. One stream serves both phases (the second starts
on the table the first compacted).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from fixtures import REPO
from fixtures.stream_process import StreamProcess, all_offsets, log_ends, produce_raw, stream_env
from fixtures.version_reader import VersionReader
from streamwarden.local.broker import LocalBroker
from streamwarden.maintenance.compaction import Journal
from streamwarden.maintenance.plan import plan_table
from streamwarden.maintenance.report import read_history
from streamwarden.maintenance.steps import maintenance_folder
from streamwarden.tables.location import RECORDS, TableLocation
from streamwarden.tables.reading import dataset

pytestmark = pytest.mark.slow


TARGET = 2**20
SMALL = int(TARGET * 0.75)


@contextmanager
def producing(bootstrap: str, topics: list[str], per_tick: int = 400) -> Iterator[None]:
    """A producer sending ``per_tick`` records every 0.25 s until the block ends."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            produce_raw(bootstrap, topics, per_tick)
            stop.wait(0.25)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(60)


def small_files(location: TableLocation) -> dict[str, int]:
    """Small files per topic, from the newest version's log: in the topic's partition that has the most. The
    stream writes the partition of the current hour only, so when the clock turns an hour during the drill the
    compacted partition of the hour before gets no new files, and the new hour's gathers them."""
    if not location.exists():
        return {}
    plan = plan_table(location.open(), location.name, small_bytes=SMALL, min_files=5)
    counts: dict[str, int] = {}
    for partition in plan.partitions:
        topic = partition.label.split("/")[0]
        counts[topic] = max(counts.get(topic, 0), partition.small_files)
    return counts


def wait_for(predicate: Callable[[], bool], job: StreamProcess, timeout: float, what: str) -> None:
    job.wait_until(predicate, timeout, what)


def finish(job: StreamProcess, bootstrap: str, topics: list[str], location: TableLocation
           ) -> dict[tuple[str, int], int]:
    """Let the stream catch up, stop it, and check every offset is in the table exactly once; the log ends."""
    expected = all_offsets(bootstrap, topics)
    job.wait_until(lambda: job.caught_up(log_ends(expected)), 600, "the stream to catch up")
    assert job.stop() == 0, job.log_tail()
    rows = dataset(location.open(), location).to_table(columns=["topic", "partition", "offset"])
    found = list(zip(*(rows.column(c).to_pylist() for c in ("topic", "partition", "offset")), strict=True))
    assert len(found) == len(set(found)), "an offset is in the table twice"
    assert set(found) == expected, "an offset is missing or invented"
    return {(t, p): end for t, parts in log_ends(expected).items() for p, end in parts.items()}


def new_stream(broker: LocalBroker, topics: list[str], tmp_path: Path) -> StreamProcess:
    prefix = topics[0].rsplit("-", 1)[0]
    return StreamProcess(stream_env(tmp_path / "home", broker.bootstrap_servers, f"{prefix}-.*",
                                    max_offsets_per_trigger="4000", trigger_interval="1s"), tmp_path / "stream.log")


def maintain(job: StreamProcess, kill_at: str | None = None) -> subprocess.Popen[str]:
    """``streamwarden maintain`` in its own process, on the stream's settings."""
    env = {**job.env, "STREAMWARDEN_MAINTENANCE_TARGET_FILE_SIZE": str(TARGET)}
    if kill_at:
        env["STREAMWARDEN_CHAOS_KILL_AT"] = kill_at
    return subprocess.Popen([sys.executable, "-m", "streamwarden", "maintain", "--json"], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@dataclass
class Beside:
    """One stream's run with maintenance beside it, and what each phase left."""

    job: StreamProcess
    location: TableLocation
    reader: VersionReader
    ends: dict[tuple[str, int], int]  # the broker's log end of each topic-partition at rest
    dag_states: dict[str, str | None]  # phase 1: maintain_tables' run (dag.test) beside the live stream
    dag_history: dict[str, Any]  # its report
    stream_alive_after_dag: bool
    outcomes: list[int | None]  # phase 2: a maintenance killed between commit and proof, one whose stream died
    last_code: int | None  # the run after the stream's restart
    last_err: str
    journal: Path


@pytest.fixture(scope="module")
def beside(broker: LocalBroker, tmp_path_factory: pytest.TempPathFactory, airflow_db: Path) -> Iterator[Beside]:
    """Phase 1: ``maintain_tables`` through ``dag.test()`` compacts beside the live stream. Phase 2, on the
    compacted table: a maintenance run dies by kill -9 between a compaction's commit and its proof; a second
    runs while the stream dies by kill -9 and the warden starts it again; the run after that finishes the work.
    A reader checks every version throughout."""
    from airflow.dag_processing.dagbag import DagBag

    from streamwarden.kafka.admin import create_topics

    tmp_path = tmp_path_factory.mktemp("beside")
    topics = [f"beside{os.getpid()}-s{i}" for i in range(2)]
    create_topics({"bootstrap.servers": broker.bootstrap_servers}, topics, 2)
    job = new_stream(broker, topics, tmp_path)
    location = TableLocation.of(job.settings, RECORDS)
    journal = Journal.path(maintenance_folder(job.settings), RECORDS)
    monkeypatch = pytest.MonkeyPatch()
    for name, value in job.env.items():
        if name.startswith("STREAMWARDEN_"):
            monkeypatch.setenv(name, value)
    monkeypatch.setenv("STREAMWARDEN_MAINTENANCE_TARGET_FILE_SIZE", str(TARGET))
    dag = DagBag(dag_folder=str(REPO / "dags" / "maintain_tables.py")).dags["maintain_tables"]
    outcomes: list[int | None] = []
    try:
        with VersionReader(location) as reader:
            with producing(broker.bootstrap_servers, topics):
                job.start()
                wait_for(lambda: min(small_files(location).values() or [0]) >= 40, job, 600,
                         "40 small files a partition")
                run = dag.test()
                dag_states = {ti.task_id: ti.state for ti in run.get_task_instances()}
                [dag_history] = read_history(maintenance_folder(job.settings) / "history.jsonl")
                time.sleep(3)  # a few more stream batches on top of the compacted files
                assert job.process is not None
                alive_after_dag = job.process.poll() is None and job.runs == []

                wait_for(lambda: min(small_files(location).values() or [0]) >= 20, job, 600,
                         "20 new small files a partition")
                killed = maintain(job, kill_at="after_compaction_commit")  # dies between a commit and its proof
                outcomes.append(killed.wait(300))
                assert journal.exists()
                wait_for(lambda: min(small_files(location).values() or [0]) >= 20, job, 600, "more small files")
                running = maintain(job)
                deadline = time.monotonic() + 120
                while not journal.exists() and running.poll() is None and time.monotonic() < deadline:
                    time.sleep(0.05)
                job.kill9()  # the stream dies while maintenance works
                outcomes.append(running.wait(300))
                job.start()  # the warden's restart
                time.sleep(5)
            ends = finish(job, broker.bootstrap_servers, topics, location)
            last = maintain(job)
            _, last_err = last.communicate(timeout=300)
        yield Beside(job, location, reader, ends, dag_states, dag_history, alive_after_dag, outcomes,
                     last.returncode, last_err, journal)
    finally:
        monkeypatch.undo()
        if job.process is not None and job.process.poll() is None:
            job.kill9()


def test_maintain_tables_compacts_beside_the_live_stream_and_readers_see_every_version_whole(
        beside: Beside) -> None:
    assert beside.dag_states == dict.fromkeys(("plan_compaction", "compact_and_prove", "vacuum_and_checkpoint",
                                               "record_report"), "success"), beside.job.log_tail()
    compacted = [p for p in beside.dag_history["partitions"] if p["action"].startswith("compacted, proven")]
    assert compacted, beside.dag_history
    for partition in compacted:
        assert partition["files_after"] <= partition["files_before"] // 10, partition  # >= 90% fewer files
    versions = [p["version"] for p in compacted]
    checked = set(beside.reader.checked)
    assert set(versions) <= checked and {v - 1 for v in versions} <= checked
    assert beside.stream_alive_after_dag  # the stream never failed or stopped because of the compaction
    assert beside.reader.problems == [], beside.reader.problems[:10]


def test_kill_9_of_maintenance_and_of_the_stream_during_compaction_lose_nothing(beside: Beside) -> None:
    assert beside.outcomes == [-9, 0] and beside.last_code == 0, (beside.outcomes, beside.last_err)
    assert not beside.journal.exists()
    assert all(count < 5 for count in small_files(beside.location).values())  # the next run finished the work
    actions = [p["action"] for run in read_history(maintenance_folder(beside.job.settings) / "history.jsonl")
               for p in run["partitions"]]
    assert "earlier run's compaction, proven" in actions
    assert len(pa.table(beside.location.open().get_add_actions())) < 40


def test_the_reader_saw_every_version_whole_and_reached_every_offset(beside: Beside) -> None:
    assert beside.reader.problems == [], beside.reader.problems[:10]
    assert beside.reader.checked == list(range(beside.location.open().version() + 1))
    assert beside.reader.high == beside.ends
