"""Committed offset runs as Delta app transactions, written to and read back from a real Delta table."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pytest
from deltalake import CommitProperties, DeltaTable

from streamwarden.tables.committed import PREFIX, Runs, TopicPartition, app_id, commits_id, partitions_of
from streamwarden.tables.ranges import IntervalIndex, OffsetRanges, committed_within, merge_intervals, uncommitted

SCHEMA = pa.schema([("offset", pa.int64())])
A0: TopicPartition = ("sites-a", 0)


@pytest.fixture()
def table(tmp_path: Path) -> Path:
    path = tmp_path / "t"
    DeltaTable.create(str(path), SCHEMA)
    return path


def commit(path: Path, covers: IntervalIndex, partitions: list[TopicPartition] | None = None) -> dict[str, int]:
    """Read the runs, extend them by ``covers`` and commit the transactions (no files), as the sink does.

    Also checks that the runs as updated in memory are what the log reads after the commit.
    """
    touched = partitions if partitions is not None else [(t, p) for t, parts in covers.items() for p in parts]
    log = DeltaTable(str(path))
    runs = Runs.read(log, touched)
    transactions = runs.extend(covers)
    log.create_write_transaction([], mode="append", schema=SCHEMA,
                                 commit_properties=CommitProperties(app_transactions=transactions))
    assert Runs.read(DeltaTable(str(path)), touched) == runs
    return {t.app_id: t.version for t in transactions}


def read(path: Path, partitions: list[TopicPartition] | None = None, version: int | None = None) -> Runs:
    return Runs.read(DeltaTable(str(path), version=version), partitions or [A0])


def test_app_ids() -> None:
    assert app_id("sites-a", 3, 0, "start") == f"{PREFIX}:sites-a:3:0:start"
    assert app_id("a.b_c-d", 12, 7, "end") == "streamwarden:a.b_c-d:12:7:end"
    assert commits_id("sites-a", 3) == "streamwarden:sites-a:3:commits"


def test_unknown_partition_has_no_runs(table: Path) -> None:
    runs = read(table, [A0, ("sites-b", 1)])
    assert runs.by_partition == {A0: [], ("sites-b", 1): []}
    assert runs.commits == {A0: 0, ("sites-b", 1): 0}
    assert runs.index() == {}


def test_first_commit_opens_run_zero(table: Path) -> None:
    assert commit(table, {"sites-a": {0: [(0, 100)]}}) == {
        "streamwarden:sites-a:0:0:start": 0, "streamwarden:sites-a:0:0:end": 100, "streamwarden:sites-a:0:commits": 1}
    runs = read(table)
    assert runs.by_partition == {A0: [(0, 100)]} and runs.commits == {A0: 1}
    assert runs.index() == {"sites-a": {0: [(0, 100)]}}


def test_commit_continuing_a_run_raises_only_its_end(table: Path) -> None:
    commit(table, {"sites-a": {0: [(0, 100)]}})
    assert commit(table, {"sites-a": {0: [(100, 150)]}}) == {
        "streamwarden:sites-a:0:0:end": 150, "streamwarden:sites-a:0:commits": 2}
    assert read(table).by_partition == {A0: [(0, 150)]}


def test_commit_after_a_gap_opens_a_new_run(table: Path) -> None:
    commit(table, {"sites-a": {0: [(0, 100)]}})
    assert commit(table, {"sites-a": {0: [(200, 250)]}}) == {
        "streamwarden:sites-a:0:1:start": 200, "streamwarden:sites-a:0:1:end": 250, "streamwarden:sites-a:0:commits": 2}
    runs = read(table)
    assert runs.by_partition == {A0: [(0, 100), (200, 250)]}
    assert runs.index() == {"sites-a": {0: [(0, 100), (200, 250)]}}
    # the next batch continues the newest run, where it ends
    assert commit(table, {"sites-a": {0: [(250, 260)]}}) == {
        "streamwarden:sites-a:0:1:end": 260, "streamwarden:sites-a:0:commits": 3}


def test_commit_filling_the_gap_bridges_the_runs(table: Path) -> None:
    commit(table, {"sites-a": {0: [(0, 100)]}})
    commit(table, {"sites-a": {0: [(200, 300)]}})
    assert commit(table, {"sites-a": {0: [(100, 200)]}}) == {
        "streamwarden:sites-a:0:0:end": 200, "streamwarden:sites-a:0:commits": 3}
    runs = read(table)
    assert runs.by_partition == {A0: [(0, 200), (200, 300)]}  # touching runs; their union is what counts
    assert runs.index() == {"sites-a": {0: [(0, 300)]}}
    commit(table, {"sites-a": {0: [(300, 310)]}})  # continues run 1, the one ending there
    assert read(table).by_partition == {A0: [(0, 200), (200, 310)]}


def test_several_covers_for_one_partition_in_one_commit(table: Path) -> None:
    commit(table, {"sites-a": {0: [(0, 100)]}})
    commit(table, {"sites-a": {0: [(200, 250)]}})
    transactions = commit(table, {"sites-a": {0: [(100, 150), (250, 300), (400, 410)]}})
    assert transactions == {
        "streamwarden:sites-a:0:0:end": 150, "streamwarden:sites-a:0:1:end": 300,
        "streamwarden:sites-a:0:2:start": 400, "streamwarden:sites-a:0:2:end": 410,
        "streamwarden:sites-a:0:commits": 3}  # counted once per commit, not per interval
    runs = read(table)
    assert runs.by_partition == {A0: [(0, 150), (200, 300), (400, 410)]}
    assert runs.index() == {"sites-a": {0: [(0, 150), (200, 300), (400, 410)]}}
    assert DeltaTable(str(table)).version() == 3


def test_partitions_are_kept_and_counted_apart(table: Path) -> None:
    commit(table, {"sites-a": {0: [(0, 10)], 1: [(5, 8)]}, "sites-b": {0: [(0, 3)]}})
    assert commit(table, {"sites-a": {1: [(8, 9)]}}, partitions=[A0, ("sites-a", 1)]) == {
        "streamwarden:sites-a:1:0:end": 9, "streamwarden:sites-a:1:commits": 2}  # sites-a/0: no transaction
    runs = read(table, [("sites-b", 0), ("sites-a", 1), A0])
    assert runs.commits == {A0: 1, ("sites-a", 1): 2, ("sites-b", 0): 1}
    assert runs.index() == {"sites-a": {0: [(0, 10)], 1: [(5, 9)]}, "sites-b": {0: [(0, 3)]}}
    assert list(runs.index()) == ["sites-a", "sites-b"]


def test_random_plans_commit_their_union_and_versions_only_grow(table: Path) -> None:
    """Plans as restarts and rewinds make them; the log's index is the union of every plan so far."""
    rng = random.Random(20261121)
    partitions = [A0, ("sites-a", 1)]
    expected: dict[TopicPartition, list[tuple[int, int]]] = {tp: [] for tp in partitions}
    app_ids: set[str] = set()
    for _ in range(20):
        ranges: OffsetRanges = {}
        for topic, partition in partitions:
            if rng.random() < 0.8:
                start = rng.randrange(0, 500)
                ranges.setdefault(topic, {})[partition] = (start, start + rng.randrange(1, 80))
        runs = read(table, partitions)
        covers, within = uncommitted(ranges, runs.index()), committed_within(ranges, runs.index())
        for topic, parts in ranges.items():
            for partition, interval in parts.items():  # the plan splits into committed and new offsets
                pieces = [*within.get(topic, {}).get(partition, []), *covers.get(topic, {}).get(partition, [])]
                assert merge_intervals(pieces) == [interval]
                expected[(topic, partition)] = merge_intervals([*expected[(topic, partition)], interval])
        app_ids |= set(commit(table, covers, partitions))
        index: IntervalIndex = {}
        for (topic, partition), intervals in expected.items():
            if intervals:
                index.setdefault(topic, {})[partition] = intervals
        assert read(table, partitions).index() == index

    last = DeltaTable(str(table)).version()
    previous: dict[str, int] = {}
    for version in range(1, last + 1):
        log = DeltaTable(str(table), version=version)
        for app in sorted(app_ids):
            value = log.transaction_version(app)
            if app in previous:
                assert value is not None and value >= previous[app], f"{app} went {previous[app]} -> {value}"
            if value is not None:
                previous[app] = value
        counts = [log.transaction_version(commits_id(*tp)) or 0 for tp in partitions]
        assert all(count <= version for count in counts)


def test_partitions_of_planned_ranges_are_sorted() -> None:
    assert partitions_of({"b": {3: (0, 1)}, "a": {2: (0, 1), 0: (5, 9)}}) == [("a", 0), ("a", 2), ("b", 3)]
    assert partitions_of({}) == []
