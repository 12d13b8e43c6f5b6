"""The Delta sink on real Delta tables in tmp_path, without Spark.

Files are written the way ``df.write.mode("overwrite").partitionBy(...).parquet(plan.write_dir)`` leaves them:
the folder cleared first, hive folders (``__HIVE_DEFAULT_PARTITION__`` for null) without the partition columns
in the files, ``part-NNNNN-<uuid>.c000.zstd.parquet`` names, hidden ``.crc`` files and ``_SUCCESS``. Tables
are read back through their Delta log only. Crashes are real ``SIGKILL``s of a child process.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.compute as pc  # type: ignore[import-untyped, unused-ignore]
import pyarrow.parquet as pq  # type: ignore[import-untyped, unused-ignore]
import pytest
from deltalake import DeltaTable
from pyarrow import fs  # type: ignore[import-untyped, unused-ignore]

from fixtures import TESTS
from fixtures.sink_batches import (
    BASE,
    BATCH,
    EVENTS,
    HIVE_NULL,
    KEEP,
    PARTITION_BY,
    QUERY,
    RANGES,
    SESSION_SCHEMA,
    TS,
    as_index,
    commit_batch,
    offsets_of,
    rows_for,
    run_batch,
    sink_of,
    spark_write,
)
from streamwarden.failures import ConfigError, FailureClass, IntegrityError
from streamwarden.stream.batch_writer import checkpoint_query_id
from streamwarden.stream.sink import delta_sink
from streamwarden.stream.sink.delta_sink import ConcurrentWriterError
from streamwarden.tables import statistics
from streamwarden.tables.committed import Runs, partitions_of
from streamwarden.tables.location import LEGACY_MANIFESTS, QUARANTINE, SESSION_ROWS, TableLocation
from streamwarden.tables.ranges import (
    IntervalIndex,
    OffsetRanges,
    batch_key,
    canonical_ranges,
    committed_within,
    merge_intervals,
    ranges_to_json,
    subtract_interval,
    uncommitted,
)
from streamwarden.tables.restore import restore_table
from streamwarden.testing.faults import CHAOS_ENV


def table_rows(path: Path, version: int | None = None) -> pa.Table:
    """The rows of the table's version, read through its Delta log (pyarrow's filesystem, see reading.py)."""
    table = DeltaTable(str(path), version=version)
    return table.to_pyarrow_dataset(filesystem=fs.SubTreeFileSystem(str(path), fs.LocalFileSystem())).to_table()


def assert_exactly_once(paths: Sequence[Path], expected: IntervalIndex | OffsetRanges,
                        keep: Callable[[int], bool] = KEEP[EVENTS]) -> None:
    """Together the tables hold each expected offset exactly once, and nothing else."""
    seen: Counter[tuple[str, int, int]] = Counter()
    for path in paths:
        rows = table_rows(path)
        seen.update(zip(*(rows.column(c).to_pylist() for c in ("topic", "partition", "offset")), strict=True))
    duplicates = sorted(k for k, n in seen.items() if n > 1)
    assert not duplicates, f"{len(duplicates)} offsets more than once, e.g. {duplicates[:5]}"
    want = {o for o in offsets_of(expected) if keep(o[2])}
    assert not want - set(seen), f"missing {sorted(want - set(seen))[:5]}"
    assert not set(seen) - want, f"unexpected {sorted(set(seen) - want)[:5]}"


def add_actions(path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = pa.table(DeltaTable(str(path)).get_add_actions(flatten=True)).to_pylist()
    return rows


# -- offset-range arithmetic the plan is made of --------------------------------------------------------------
@pytest.mark.parametrize(("given", "expected"), [
    ({}, {}),
    ({"b": {"1": [5, 9], "0": [0, 3]}, "a": {2: (1, 2)}}, {"a": {2: (1, 2)}, "b": {0: (0, 3), 1: (5, 9)}}),
    ({"a": {0: (4, 4), 1: (0, 1)}}, {"a": {1: (0, 1)}}),
    ({"a": {0: (4, 4)}}, {}),
])
def test_canonical_ranges_sorts_and_drops_idle_partitions(given: Any, expected: OffsetRanges) -> None:
    result = canonical_ranges(given)
    assert result == expected
    assert list(result) == sorted(result)
    assert all(list(parts) == sorted(parts) for parts in result.values())


@pytest.mark.parametrize("given", [
    {"a": {0: (5, 4)}}, {"a": {0: (-1, 4)}}, {"a": {-1: (0, 4)}}, {"a": {0: (1, 2, 3)}},
    {"a": {0: (0, 1), "0": (0, 1)}},
])
def test_canonical_ranges_rejects_invalid_ranges(given: Any) -> None:
    with pytest.raises(ValueError, match="a/"):
        canonical_ranges(given)


def test_batch_key_is_deterministic_and_order_free() -> None:
    key = batch_key({"a": {0: (0, 10), 1: (3, 4)}, "b": {0: (1, 2)}})
    shuffled = {"b": {"0": [1, 2]}, "a": {"1": [3, 4], "0": [0, 10], "7": [9, 9]}}
    assert key == batch_key(canonical_ranges(shuffled))
    assert len(key) == 16 and int(key, 16) >= 0
    assert key != batch_key({"a": {0: (0, 11), 1: (3, 4)}, "b": {0: (1, 2)}})


def test_batch_key_is_salted_by_the_checkpoints_query_id() -> None:
    ranges: OffsetRanges = {"a": {0: (0, 10)}}
    salted = batch_key(ranges, QUERY)
    assert salted == batch_key(canonical_ranges({"a": {"0": [0, 10], "1": [4, 4]}}), QUERY)  # the same replay
    assert len(salted) == 16 and salted != batch_key(ranges)
    assert salted != batch_key(ranges, str(uuid.uuid4()))  # a new checkpoint
    assert batch_key({"a": {0: (0, 11)}}, QUERY) != salted


@pytest.mark.parametrize(("given", "expected"), [
    ([], []), ([(5, 5)], []), ([(5, 9), (0, 3)], [(0, 3), (5, 9)]), ([(0, 3), (3, 6)], [(0, 6)]),
    ([(0, 10), (2, 4), (9, 12), (20, 21)], [(0, 12), (20, 21)]),
])
def test_merge_intervals(given: list[tuple[int, int]], expected: list[tuple[int, int]]) -> None:
    assert merge_intervals(given) == expected


@pytest.mark.parametrize(("interval", "covered", "rest"), [
    ((0, 10), [], [(0, 10)]), ((0, 10), [(0, 10)], []), ((0, 10), [(-5, 20)], []),
    ((0, 10), [(3, 5)], [(0, 3), (5, 10)]), ((0, 10), [(0, 2), (4, 6), (8, 12)], [(2, 4), (6, 8)]),
    ((5, 10), [(0, 5), (10, 15)], [(5, 10)]), ((5, 10), [(0, 7)], [(7, 10)]),
])
def test_subtract_interval(interval: tuple[int, int], covered: list[tuple[int, int]],
                           rest: list[tuple[int, int]]) -> None:
    assert subtract_interval(interval, covered) == rest


def test_committed_within_and_uncommitted_split_the_plan() -> None:
    index: IntervalIndex = {"a": {0: [(0, 50), (60, 70)], 1: [(0, 10)]}, "c": {0: [(0, 5)]}}
    ranges: OffsetRanges = {"a": {0: (40, 100), 1: (10, 20), 2: (0, 5)}, "b": {0: (0, 1)}}
    assert committed_within(ranges, index) == {"a": {0: [(40, 50), (60, 70)]}}
    assert uncommitted(ranges, index) == {"a": {0: [(50, 60), (70, 100)], 1: [(10, 20)], 2: [(0, 5)]},
                                          "b": {0: [(0, 1)]}}


# -- one batch -----------------------------------------------------------------------------------------------
def test_batch_commits_once_and_its_replay_is_fully_committed(tmp_path: Path) -> None:
    sink = sink_of(tmp_path)
    path = tmp_path / EVENTS
    assert DeltaTable(str(path)).version() == 0  # created by the sink, empty
    plan = sink.plan(RANGES, BATCH)
    assert (plan.table, plan.batch_id, plan.key) == (EVENTS, BATCH, batch_key(RANGES))
    assert plan.write_dir == str(path / f"batch-{plan.key}") and not Path(plan.write_dir).exists()
    assert plan.covers == as_index(RANGES) and plan.already_committed == {}
    assert not plan.fully_committed

    spark_write(plan.write_dir, rows_for(EVENTS, plan.covers), PARTITION_BY)
    result = sink.commit(plan)
    assert (result.table, result.batch_id, result.version, result.covers) == (EVENTS, BATCH, 1, plan.covers)
    assert result.rows == len(offsets_of(RANGES)) and result.files == len(list(Path(plan.write_dir).rglob("*.parquet")))
    assert_exactly_once([path], RANGES)
    (entry,) = DeltaTable(str(path)).history(limit=1)
    assert entry["streamwarden.batch_id"] == str(BATCH) and entry["streamwarden.batch_key"] == plan.key
    assert json.loads(entry["streamwarden.ranges"]) == ranges_to_json(RANGES)

    replay = sink.plan(RANGES, BATCH)
    assert replay.fully_committed and replay.covers == {} and replay.already_committed == as_index(RANGES)
    assert replay.write_dir == plan.write_dir
    with pytest.raises(ValueError, match="fully committed"):
        sink.commit(replay)  # the folder holds the committed files: they must never be added twice
    assert DeltaTable(str(path)).version() == 1
    assert_exactly_once([path], RANGES)


def test_partial_overlap_commits_only_the_missing_offsets(tmp_path: Path) -> None:
    sink = sink_of(tmp_path)
    commit_batch(sink, {"sites-a": {0: (0, 100)}, "sites-b": {0: (0, 30)}}, batch_id=1)
    ranges: OffsetRanges = {"sites-a": {0: (50, 150), 1: (0, 20)}, "sites-b": {0: (0, 30)}}
    plan = sink.plan(ranges, batch_id=2)
    assert plan.covers == {"sites-a": {0: [(100, 150)], 1: [(0, 20)]}}
    assert plan.already_committed == {"sites-a": {0: [(50, 100)]}, "sites-b": {0: [(0, 30)]}}
    assert not plan.fully_committed
    spark_write(plan.write_dir, rows_for(EVENTS, plan.covers), PARTITION_BY)  # the rows the writers keep
    result = sink.commit(plan)
    assert result.rows == 70 and result.covers == plan.covers
    assert_exactly_once([tmp_path / EVENTS], {"sites-a": {0: [(0, 150)], 1: [(0, 20)]}, "sites-b": {0: [(0, 30)]}})
    assert sink.plan(ranges, batch_id=3).fully_committed


def test_new_sink_on_the_same_table_still_deduplicates(tmp_path: Path) -> None:
    """A fresh checkpoint (new query, new driver) knows nothing of the batches: the table's log does."""
    commit_batch(sink_of(tmp_path), RANGES, batch_id=BATCH)
    fresh = sink_of(tmp_path)
    assert fresh.plan(RANGES, batch_id=0).fully_committed
    plan = fresh.plan({"sites-a": {0: (100, 130)}, "sites-c": {0: (0, 5)}}, batch_id=0)
    assert plan.covers == {"sites-a": {0: [(120, 130)]}, "sites-c": {0: [(0, 5)]}}
    assert plan.already_committed == {"sites-a": {0: [(100, 120)]}}
    spark_write(plan.write_dir, rows_for(EVENTS, plan.covers), PARTITION_BY)
    fresh.commit(plan)
    assert_exactly_once([tmp_path / EVENTS], {**as_index(RANGES), "sites-a": {0: [(0, 130)], 1: [(10, 60)]},
                                              "sites-c": {0: [(0, 5)]}})


def test_restart_skipping_forward_then_rewinding_fills_the_hole(tmp_path: Path) -> None:
    sink = sink_of(tmp_path)
    partition = [("sites-a", 0)]
    commit_batch(sink, {"sites-a": {0: (0, 100)}}, batch_id=1)
    commit_batch(sink_of(tmp_path), {"sites-a": {0: (200, 300)}}, batch_id=0)  # explicit offsets, skip ahead
    runs = Runs.read(DeltaTable(str(tmp_path / EVENTS)), partition)
    assert runs.by_partition[("sites-a", 0)] == [(0, 100), (200, 300)]
    assert runs.index() == {"sites-a": {0: [(0, 100), (200, 300)]}}

    plan = sink_of(tmp_path).plan({"sites-a": {0: (50, 250)}}, batch_id=0)  # rewind into the hole
    assert plan.covers == {"sites-a": {0: [(100, 200)]}}
    assert plan.already_committed == {"sites-a": {0: [(50, 100), (200, 250)]}}
    spark_write(plan.write_dir, rows_for(EVENTS, plan.covers), PARTITION_BY)
    sink.commit(plan)
    runs = Runs.read(DeltaTable(str(tmp_path / EVENTS)), partition)
    assert runs.by_partition[("sites-a", 0)] == [(0, 200), (200, 300)]  # run 0 bridged the hole to run 1
    assert runs.index() == {"sites-a": {0: [(0, 300)]}} and runs.commits[("sites-a", 0)] == 3
    assert_exactly_once([tmp_path / EVENTS], {"sites-a": {0: (0, 300)}})
    assert sink.plan({"sites-a": {0: (0, 300)}}, batch_id=4).fully_committed


def test_committed_runs_survive_checkpoint_and_log_cleanup(tmp_path: Path) -> None:
    path = tmp_path / EVENTS
    DeltaTable.create(str(path), SESSION_SCHEMA, partition_by=PARTITION_BY,
                      configuration={"delta.logRetentionDuration": "interval 0 seconds"})
    sink = sink_of(tmp_path)  # checks the existing table and continues it
    commit_batch(sink, {"sites-a": {0: (0, 100)}, "sites-b": {0: (0, 10)}}, batch_id=1)
    commit_batch(sink, {"sites-a": {0: (100, 200)}}, batch_id=2)
    commit_batch(sink, {"sites-a": {0: (300, 350)}}, batch_id=3)
    table = DeltaTable(str(path))
    table.create_checkpoint()
    table.cleanup_metadata()
    log = path / "_delta_log"
    assert not (log / f"{0:020d}.json").exists() and not (log / f"{2:020d}.json").exists()
    assert (log / f"{3:020d}.checkpoint.parquet").exists()
    assert len(DeltaTable(str(path)).history()) == 1  # commitInfo of older versions is gone with their logs

    reopened = DeltaTable(str(path))
    runs = Runs.read(reopened, [("sites-a", 0), ("sites-b", 0)])
    assert runs.by_partition == {("sites-a", 0): [(0, 200), (300, 350)], ("sites-b", 0): [(0, 10)]}
    assert runs.commits == {("sites-a", 0): 3, ("sites-b", 0): 1}
    fresh = sink_of(tmp_path)
    assert fresh.plan({"sites-a": {0: (0, 200)}, "sites-b": {0: (0, 10)}}, batch_id=1).fully_committed
    plan, _ = commit_batch(fresh, {"sites-a": {0: (150, 400)}}, batch_id=4)
    assert plan.covers == {"sites-a": {0: [(200, 300), (350, 400)]}}
    assert_exactly_once([path], {"sites-a": {0: (0, 400)}, "sites-b": {0: (0, 10)}})


def test_empty_batch_records_its_ranges_in_a_commit_without_files(tmp_path: Path) -> None:
    sink = sink_of(tmp_path)
    plan = sink.plan(RANGES, BATCH)
    result = sink.commit(plan)  # the table got no row of the batch: Spark wrote nothing
    assert (result.version, result.files, result.rows) == (1, 0, 0)
    path = tmp_path / EVENTS
    assert add_actions(path) == [] and table_rows(path).num_rows == 0
    assert Runs.read(DeltaTable(str(path)), partitions_of(RANGES)).index() == as_index(RANGES)
    assert sink_of(tmp_path).plan(RANGES, BATCH).fully_committed


def test_spark_markers_temporary_files_and_zero_row_files_are_not_committed(tmp_path: Path) -> None:
    sink = sink_of(tmp_path)
    plan = sink.plan(RANGES, BATCH)
    spark_write(plan.write_dir, rows_for(EVENTS, plan.covers), PARTITION_BY)
    data_files = sorted(Path(plan.write_dir).rglob("*.parquet"))
    empty = SESSION_SCHEMA.empty_table().drop_columns(PARTITION_BY)
    pq.write_table(empty, Path(plan.write_dir) / "part-00099-empty.c000.zstd.parquet")  # as for an empty write
    hive = data_files[0].parent
    pq.write_table(empty, hive / "part-00098-empty.c000.zstd.parquet")
    leftover = Path(plan.write_dir) / "_temporary" / "0" / "_temporary" / "attempt_1" / "source_topic=sites-a"
    leftover.mkdir(parents=True)
    shutil.copy(data_files[0], leftover / "part-00000-leftover.c000.zstd.parquet")
    assert (Path(plan.write_dir) / "_SUCCESS").exists() and any(Path(plan.write_dir).rglob(".*.crc"))

    result = sink.commit(plan)
    assert result.files == len(data_files)
    committed = sorted(tmp_path / EVENTS / a["path"] for a in add_actions(tmp_path / EVENTS))
    assert committed == data_files
    assert_exactly_once([tmp_path / EVENTS], RANGES)


def test_only_zero_row_files_commit_no_file(tmp_path: Path) -> None:
    sink = sink_of(tmp_path, partition_by=[])
    plan = sink.plan(RANGES, BATCH)
    Path(plan.write_dir).mkdir(parents=True)
    pq.write_table(SESSION_SCHEMA.empty_table(), Path(plan.write_dir) / "part-00000-x.c000.zstd.parquet")
    (Path(plan.write_dir) / "_SUCCESS").touch()
    assert sink.commit(plan).files == 0
    assert add_actions(tmp_path / EVENTS) == []


def test_partition_values_come_from_the_folder_names(tmp_path: Path) -> None:
    sink = sink_of(tmp_path)
    plan, _ = commit_batch(sink, {"sites-a": {0: (0, 120)}})
    actions = add_actions(tmp_path / EVENTS)
    folders = {(a["partition.source_topic"], a["partition.event_date"], a["partition.event_hour"])
               for a in actions}
    assert ("sites-a", None, None) in folders  # __HIVE_DEFAULT_PARTITION__
    assert ("sites-a", "2026-11-21", "23") in folders and ("sites-a", "2026-11-22", "00") in folders
    for action in actions:
        relative = Path(action["path"])
        assert relative.parts[0] == f"batch-{plan.key}"
        expected = [None if v == HIVE_NULL else v for v in (p.split("=", 1)[1] for p in relative.parts[1:-1])]
        assert [action[f"partition.{c}"] for c in PARTITION_BY] == expected

    rows = table_rows(tmp_path / EVENTS).to_pylist()
    assert len(rows) == 120
    for row in rows:
        if row["offset"] % 10 == 9:
            assert row["event_ts"] is None and row["event_date"] is None and row["event_hour"] is None
        else:
            assert row["event_date"] == row["event_ts"].strftime("%Y-%m-%d")
            assert row["event_hour"] == row["event_ts"].strftime("%H") and row["source_topic"] == row["topic"]


def test_file_statistics_are_in_the_log(tmp_path: Path) -> None:
    _, result = commit_batch(sink_of(tmp_path), RANGES)
    actions = add_actions(tmp_path / EVENTS)
    assert len(actions) == result.files and sum(a["num_records"] for a in actions) == result.rows
    for action in actions:
        offsets = pq.read_table(tmp_path / EVENTS / action["path"]).column("offset").to_pylist()
        assert action["num_records"] == len(offsets) > 0
        assert (action["min.offset"], action["max.offset"]) == (min(offsets), max(offsets))
        assert action["null_count.offset"] == 0
        assert action["min.topic"] == action["max.topic"] == action["partition.source_topic"]


def test_file_statistics_from_the_footer(tmp_path: Path) -> None:
    path = tmp_path / "f.parquet"
    pq.write_table(pa.table({"headers": pa.array([{"offset": 99, "k": "x"}] * 3),
                             "topic": ["b", None, "a"], "offset": pa.array([7, 3, 5], pa.int64()),
                             "event_ts": pa.array([BASE, None, BASE + timedelta(hours=1)], TS)}),
                   path, row_group_size=2)
    assert statistics.file_statistics(path, ("topic", "offset", "event_ts", "missing")) == {
        "numRecords": 3,
        "minValues": {"topic": "a", "offset": 3, "event_ts": "2026-11-21T23:00:00.000Z"},
        "maxValues": {"topic": "b", "offset": 7, "event_ts": "2026-11-22T00:00:00.000Z"},
        "nullCount": {"topic": 1, "offset": 0, "event_ts": 1},
    }  # headers.offset (a nested leaf) is not the offset column


def test_file_outside_the_partition_folders_is_refused(tmp_path: Path) -> None:
    sink = sink_of(tmp_path)
    plan = sink.plan(RANGES, BATCH)
    spark_write(plan.write_dir, rows_for(EVENTS, plan.covers), ["source_topic", "event_date"])
    with pytest.raises(IntegrityError, match="partition columns") as caught:
        sink.commit(plan)
    assert caught.value.failure_class is FailureClass.INTEGRITY
    assert DeltaTable(str(tmp_path / EVENTS)).version() == 0


# -- batch folders across checkpoints (recovery) ------------------------------------------------------------
def test_same_ranges_in_the_same_checkpoint_reuse_the_batch_folder(tmp_path: Path) -> None:
    """A replay after a crash before the commit overwrites its own half-written attempt, and nothing else."""
    first = sink_of(tmp_path).plan(RANGES, BATCH, QUERY)
    spark_write(first.write_dir, rows_for(EVENTS, first.covers), PARTITION_BY)
    attempt = set(Path(first.write_dir).rglob("*.parquet"))
    replay = sink_of(tmp_path).plan(RANGES, BATCH, QUERY)  # the restarted driver, on the same checkpoint
    assert (replay.key, replay.write_dir) == (first.key, first.write_dir) == (
        batch_key(RANGES, QUERY), str(tmp_path / EVENTS / f"batch-{batch_key(RANGES, QUERY)}"))
    spark_write(replay.write_dir, rows_for(EVENTS, replay.covers), PARTITION_BY)
    assert not attempt & set(Path(replay.write_dir).rglob("*.parquet"))  # the overwrite cleared the attempt
    sink_of(tmp_path).commit(replay)
    (entry,) = DeltaTable(str(tmp_path / EVENTS)).history(limit=1)
    assert (entry["streamwarden.batch_key"], entry["streamwarden.query_id"]) == (replay.key, QUERY)
    assert_exactly_once([tmp_path / EVENTS], RANGES)


def test_a_new_checkpoint_replaying_restored_offsets_keeps_earlier_versions_readable(tmp_path: Path) -> None:
    """Restore to V gives offsets back; the new checkpoint's replay of the same ranges writes a new folder, so the
    versions before the restore keep their files and the recovery can itself be undone."""
    path = tmp_path / EVENTS
    second: OffsetRanges = {"sites-a": {0: (120, 200)}, "sites-b": {0: (30, 50)}}
    commit_batch(sink_of(tmp_path), RANGES, 0, QUERY)  # version 1
    before, _ = commit_batch(sink_of(tmp_path), second, 1, QUERY)  # version 2: what the recovery rolls back
    files_before = {p: p.read_bytes() for p in Path(before.write_dir).rglob("*.parquet")}
    rows_before = table_rows(path, version=2).sort_by([("topic", "ascending"), ("partition", "ascending"),
                                                       ("offset", "ascending")])
    restored = restore_table(TableLocation(EVENTS, path, {}), 1, "recovery-test")
    assert (restored.version, restored.undone) == (3, as_index(second))

    assert sink_of(tmp_path).plan(second, 1, QUERY).write_dir == before.write_dir  # the old checkpoint: same folder
    new_query = str(uuid.uuid4())  # the recovery's new checkpoint replays the given-back offsets
    replay, result = commit_batch(sink_of(tmp_path), second, 0, new_query)
    assert replay.covers == as_index(second) and result.version == 4
    assert replay.key == batch_key(second, new_query) != before.key and replay.write_dir != before.write_dir
    assert {p: p.read_bytes() for p in Path(before.write_dir).rglob("*.parquet")} == files_before
    again = table_rows(path, version=2).sort_by([("topic", "ascending"), ("partition", "ascending"),
                                                 ("offset", "ascending")])
    assert again.equals(rows_before) and again.num_rows == len(offsets_of(RANGES)) + len(offsets_of(second))
    assert table_rows(path, version=3).num_rows == len(offsets_of(RANGES))
    assert_exactly_once([path], {**as_index(RANGES), "sites-a": {0: [(0, 200)], 1: [(10, 60)]},
                                 "sites-b": {0: [(0, 50)]}})
    assert {Path(a["path"]).parts[0] for a in add_actions(path)} == {f"batch-{batch_key(RANGES, QUERY)}",
                                                                     f"batch-{replay.key}"}


def test_the_query_id_is_read_from_the_checkpoint_metadata(tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint"
    with pytest.raises(IntegrityError, match="no query id") as missing:
        checkpoint_query_id(checkpoint)  # a batch before Spark wrote the metadata: never guess a key
    assert missing.value.failure_class is FailureClass.INTEGRITY
    checkpoint.mkdir()
    (checkpoint / "metadata").write_text(f'{{"id":"{QUERY}"}}')  # as Spark writes it: one line, no newline
    assert checkpoint_query_id(checkpoint) == QUERY
    (checkpoint / "metadata").write_text('{"other": 1}\n')
    with pytest.raises(IntegrityError, match="cannot be read"):
        checkpoint_query_id(checkpoint)


# -- another writer ------------------------------------------------------------------------------------------
def test_writer_committing_the_same_offsets_after_the_plan_wins(tmp_path: Path) -> None:
    first = sink_of(tmp_path)
    plan = first.plan(RANGES, BATCH)
    spark_write(plan.write_dir, rows_for(EVENTS, plan.covers), PARTITION_BY)
    other = sink_of(tmp_path)  # a second stream on the same output root
    commit_batch(other, {"sites-a": {0: (100, 200)}}, batch_id=0)
    with pytest.raises(ConcurrentWriterError, match="committed by another writer") as caught:
        first.commit(plan)
    assert caught.value.failure_class is FailureClass.INTEGRITY
    assert caught.value.details == {"planned": ranges_to_json(RANGES)}
    assert DeltaTable(str(tmp_path / EVENTS)).version() == 1
    assert_exactly_once([tmp_path / EVENTS], {"sites-a": {0: (100, 200)}})


def test_offsets_another_writer_committed_after_this_sinks_own_commit_are_seen(tmp_path: Path) -> None:
    """The sink knows the offsets its own commit added; a commit of anyone else moves the version, and the
    next plan reads the log again."""
    sink = sink_of(tmp_path)
    commit_batch(sink, {"sites-a": {0: (0, 100)}}, batch_id=1)
    assert sink.plan({"sites-a": {0: (0, 100)}}, batch_id=1).fully_committed  # known from its own commit
    commit_batch(sink_of(tmp_path), {"sites-a": {0: (100, 200)}}, batch_id=0)
    plan = sink.plan({"sites-a": {0: (100, 250)}}, batch_id=2)
    assert (plan.already_committed, plan.covers) == ({"sites-a": {0: [(100, 200)]}}, {"sites-a": {0: [(200, 250)]}})
    spark_write(plan.write_dir, rows_for(EVENTS, plan.covers), PARTITION_BY)
    sink.commit(plan)
    assert_exactly_once([tmp_path / EVENTS], {"sites-a": {0: (0, 250)}})


def test_writer_committing_other_offsets_of_the_table_does_not_conflict(tmp_path: Path) -> None:
    first = sink_of(tmp_path)
    plan = first.plan({"sites-a": {0: (0, 50)}}, 1)
    spark_write(plan.write_dir, rows_for(EVENTS, plan.covers), PARTITION_BY)
    commit_batch(sink_of(tmp_path), {"sites-a": {0: (50, 100)}, "sites-b": {0: (0, 10)}}, batch_id=0)
    first.commit(plan)
    assert_exactly_once([tmp_path / EVENTS], {"sites-a": {0: (0, 100)}, "sites-b": {0: (0, 10)}})


def test_writer_committing_between_the_check_and_the_commit_wins(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The other writer's commit lands after this one re-read the offsets, in another run of the partition."""
    sink = sink_of(tmp_path)
    commit_batch(sink, {"sites-a": {0: (0, 100)}}, batch_id=1)
    plan = sink.plan({"sites-a": {0: (100, 150)}}, batch_id=2)  # extends run 0
    spark_write(plan.write_dir, rows_for(EVENTS, plan.covers), PARTITION_BY)
    other = sink_of(tmp_path)
    other_plan = other.plan({"sites-a": {0: (120, 200)}}, batch_id=0)  # explicit offsets: opens run 1
    spark_write(other_plan.write_dir, rows_for(EVENTS, other_plan.covers), PARTITION_BY)

    def other_commits_first(point: str) -> None:
        if point == "before_commit":
            monkeypatch.setattr(delta_sink, "chaos_point", lambda _: None)
            other.commit(other_plan)

    monkeypatch.setattr(delta_sink, "chaos_point", other_commits_first)
    with pytest.raises(ConcurrentWriterError, match="lost to another writer"):
        sink.commit(plan)
    assert_exactly_once([tmp_path / EVENTS], {"sites-a": {0: [(0, 100), (120, 200)]}})


# -- the table's settings ------------------------------------------------------------------------------------
def test_other_schema_or_partitioning_on_an_existing_table_is_a_config_error(tmp_path: Path) -> None:
    sink_of(tmp_path)
    sink_of(tmp_path)  # the same settings continue the table
    with pytest.raises(ConfigError, match="was created with") as caught:
        sink_of(tmp_path, schema=SESSION_SCHEMA.append(pa.field("extra", pa.string())))
    assert caught.value.failure_class is FailureClass.CONFIG
    with pytest.raises(ConfigError, match="was created with"):
        sink_of(tmp_path, schema=SESSION_SCHEMA.set(2, pa.field("offset", pa.int32())))
    with pytest.raises(ConfigError, match="partitions"):
        sink_of(tmp_path, partition_by=["source_topic", "event_date"])
    with pytest.raises(ConfigError, match="partitions"):
        sink_of(tmp_path, partition_by=["event_date", "source_topic", "event_hour"])
    assert DeltaTable(str(tmp_path / EVENTS)).version() == 0


def test_output_folder_in_the_manifest_layout_is_refused(tmp_path: Path) -> None:
    (tmp_path / EVENTS / LEGACY_MANIFESTS).mkdir(parents=True)
    with pytest.raises(ConfigError, match=LEGACY_MANIFESTS) as caught:
        sink_of(tmp_path)
    assert caught.value.failure_class is FailureClass.CONFIG
    assert not (tmp_path / EVENTS / "_delta_log").exists()


# -- kill -9 -------------------------------------------------------------------------------------------------
_CHILD = """
import json, sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from fixtures.sink_batches import run_batch
run_batch(Path(sys.argv[2]), json.loads(sys.argv[3]), json.loads(sys.argv[4]), int(sys.argv[5]))
"""


def run_child(root: Path, tables: Sequence[str], kill_at: str | None) -> int:
    """The batch in a child process that sends itself SIGKILL at ``kill_at``."""
    env = {k: v for k, v in os.environ.items() if k != CHAOS_ENV}
    if kill_at:
        env[CHAOS_ENV] = kill_at
    done = subprocess.run([sys.executable, "-c", _CHILD, str(TESTS), str(root), json.dumps(list(tables)),
                           json.dumps(ranges_to_json(RANGES)), str(BATCH)],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode in {0, -signal.SIGKILL}, done.stderr
    return done.returncode


@pytest.mark.parametrize("kill_at", ["before_commit", "after_commit"])
def test_kill_9_around_the_commit_then_replay(tmp_path: Path, kill_at: str) -> None:
    root = tmp_path / "out"
    path = root / EVENTS
    assert run_child(root, [EVENTS], kill_at) == -signal.SIGKILL
    plan = sink_of(root).plan(RANGES, BATCH, QUERY)  # the restarted driver, on the same checkpoint
    if kill_at == "before_commit":
        assert DeltaTable(str(path)).version() == 0 and table_rows(path).num_rows == 0
        left = set(Path(plan.write_dir).rglob("*.parquet"))
        assert left, "the killed attempt wrote its files"
        assert plan.covers == as_index(RANGES) and plan.already_committed == {}
    else:
        assert DeltaTable(str(path)).version() == 1 and plan.fully_committed
        assert_exactly_once([path], RANGES)

    (replayed,) = run_batch(root, [EVENTS], RANGES)
    assert replayed.fully_committed is (kill_at == "after_commit")
    assert DeltaTable(str(path)).version() == 1
    if kill_at == "before_commit":
        assert not left & set(Path(plan.write_dir).rglob("*.parquet"))  # the overwrite replaced the attempt's files
        assert {path / a["path"] for a in add_actions(path)} == set(Path(plan.write_dir).rglob("*.parquet"))
    assert_exactly_once([path], RANGES)
    assert Runs.read(DeltaTable(str(path)), partitions_of(RANGES)).index() == as_index(RANGES)
    assert all(p.fully_committed for p in run_batch(root, [EVENTS], RANGES))


@pytest.mark.parametrize(("kill_at", "committed_before_replay"), [
    ("before_commit", []), ("after_commit", [SESSION_ROWS]),
])
def test_kill_9_between_two_tables_then_replay(tmp_path: Path, kill_at: str,
                                               committed_before_replay: list[str]) -> None:
    root = tmp_path / "out"
    tables = [SESSION_ROWS, QUARANTINE]
    assert run_child(root, tables, kill_at) == -signal.SIGKILL
    for name in tables:
        assert DeltaTable(str(root / name)).version() == (1 if name in committed_before_replay else 0)

    plans = run_batch(root, tables, RANGES)
    assert [p.fully_committed for p in plans] == [name in committed_before_replay for name in tables]
    for name in tables:
        assert DeltaTable(str(root / name)).version() == 1
        assert_exactly_once([root / name], RANGES, keep=KEEP[name])
        assert Runs.read(DeltaTable(str(root / name)), partitions_of(RANGES)).index() == as_index(RANGES)
    assert_exactly_once([root / name for name in tables], RANGES)
    assert all(p.fully_committed for p in run_batch(root, tables, RANGES))


def test_file_statistics_of_every_column_bound_what_delta_keeps_bounds_of(tmp_path: Path) -> None:
    path = tmp_path / "f.parquet"
    pq.write_table(pa.table({"offset": pa.array([7, 3, 5], pa.int64()), "key": [b"k", None, b"j"],
                             "boundary": pa.array([None, None, None], pa.string()), "flag": [True, None, False],
                             "event_ts": pa.array([BASE + timedelta(microseconds=1500), None, BASE], TS)}),
                   path, row_group_size=2)
    assert statistics.file_statistics(path, None) == {
        "numRecords": 3,
        "minValues": {"offset": 3, "flag": False, "event_ts": "2026-11-21T23:00:00.000Z"},
        "maxValues": {"offset": 7, "flag": True, "event_ts": "2026-11-21T23:00:00.002Z"},  # rounded up
        "nullCount": {"offset": 0, "key": 1, "boundary": 3, "flag": 1, "event_ts": 1},
    }  # binary columns and all-null ones: a null count alone


def test_a_filter_on_any_column_finds_its_rows_in_a_committed_batch(tmp_path: Path) -> None:
    sink = sink_of(tmp_path)
    _, result = commit_batch(sink, RANGES)
    table = DeltaTable(str(tmp_path / EVENTS))
    everything = table.to_pyarrow_dataset().to_table()
    wanted = everything.column("session_id")[0].as_py()
    expected = pc.sum(pc.equal(everything.column("session_id"), wanted)).as_py()
    assert 0 < expected < result.rows
    found = table.to_pyarrow_dataset().to_table(filter=pc.field("session_id") == wanted)
    assert found.num_rows == expected, "every column has statistics, so delta-rs's dataset prunes no wrong file"
