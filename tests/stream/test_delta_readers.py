"""Readers beside the live stream: every Delta version they see is whole, and three readers agree.

The real job (records pipeline, small batches) writes while a reader opens each new version of the table
and checks, per topic-partition, that the rows are exactly the offsets the version's log records as
committed (no part of a batch, no duplicate), and that no offset seen once goes missing later.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from streamwarden.local.broker import LocalBroker
from streamwarden.tables.committed import Runs
from streamwarden.tables.location import RECORDS, TableLocation
from streamwarden.tables.reading import dataset
from support import StreamProcess, produce_raw, stream_env

pytestmark = pytest.mark.slow

MESSAGES = 200_000
CAP = 20_000

Seen = dict[tuple[str, int], list[tuple[int, int]]]


def _offsets_at(location: TableLocation, version: int) -> tuple[pa.Table, Seen]:
    table = location.open(version)
    rows = dataset(table, location).to_table(columns=["topic", "partition", "offset"])
    partitions = {(t, p) for t, p in zip(rows.column("topic").to_pylist(), rows.column("partition").to_pylist(),
                                         strict=True)}
    return rows, {(t, p): runs for t, parts in Runs.read(table, sorted(partitions)).index().items()
                  for p, runs in parts.items()}


def _check_version(rows: pa.Table, committed: Seen) -> list[str]:
    """Rows of one version against the runs its log records: the same offsets, each once."""
    problems = []
    grouped: dict[tuple[str, int], list[int]] = {}
    for topic, partition, offset in zip(*(rows.column(c).to_pylist() for c in ("topic", "partition", "offset")),
                                        strict=True):
        grouped.setdefault((topic, partition), []).append(offset)
    for key, offsets in grouped.items():
        if len(offsets) != len(set(offsets)):
            problems.append(f"{key}: {len(offsets) - len(set(offsets))} duplicate(s)")
        runs = [(min(offsets), max(offsets) + 1)] if len(set(offsets)) == max(offsets) - min(offsets) + 1 else None
        if runs != committed.get(key):
            problems.append(f"{key}: rows cover {runs or 'offsets with holes'}, the log records {committed.get(key)}")
    return problems


def test_a_reader_beside_the_stream_sees_whole_batches_and_three_readers_agree(
    broker: LocalBroker, topic_factory: Callable[..., list[str]], tmp_path: Path
) -> None:
    topics = topic_factory(2, partitions=3)
    prefix = topics[0].rsplit("-", 1)[0]
    ends = produce_raw(broker.bootstrap_servers, topics, MESSAGES)
    job = StreamProcess(stream_env(tmp_path / "home", broker.bootstrap_servers, f"{prefix}-.*",
                                   max_offsets_per_trigger=str(CAP), trigger_interval="500ms"), tmp_path / "stream.log")
    location = TableLocation.of(job.settings, RECORDS)
    stop = threading.Event()
    checked: list[int] = []
    problems: list[str] = []
    high: dict[tuple[str, int], int] = {}

    def read_every_version() -> None:
        while not stop.is_set():
            latest = location.open().version() if location.exists() else -1
            for version in range(checked[-1] + 1 if checked else 0, latest + 1):
                rows, committed = _offsets_at(location, version)
                problems.extend(f"version {version}: {p}" for p in _check_version(rows, committed))
                for key, runs in committed.items():
                    if runs[-1][1] < high.get(key, 0):
                        problems.append(f"version {version}: {key} went back from {high[key]} to {runs[-1][1]}")
                    high[key] = runs[-1][1]
                checked.append(version)
            stop.wait(0.2)

    reader = threading.Thread(target=read_every_version, daemon=True)
    reader.start()
    job.start()
    try:
        job.wait_until(lambda: job.caught_up(ends), 600, "all offsets committed")
    finally:
        assert job.stop() == 0, job.log_tail()
        stop.set()
        reader.join(60)

    assert problems == [], problems[:10]
    assert len(checked) >= MESSAGES // CAP, f"the reader saw only {len(checked)} versions"
    assert high == {(t, p): end for t, parts in ends.items() for p, end in parts.items()}

    root = str(location.path)
    by_deltalake = dataset(DeltaTable(root), location).to_table(columns=["topic", "partition", "offset"])
    by_polars = pl.scan_delta(root).select("topic", "partition", "offset").collect().to_arrow()
    with duckdb.connect() as con:
        con.register("records", dataset(DeltaTable(root), location))
        by_duckdb = con.execute('SELECT topic, "partition", "offset" FROM records').to_arrow_table()
    answers = [sorted(zip(*(t.column(c).to_pylist() for c in ("topic", "partition", "offset")), strict=True))
               for t in (by_deltalake, by_polars, by_duckdb)]
    assert answers[0] == answers[1] == answers[2]
    assert len(answers[0]) == MESSAGES == len(set(answers[0]))
