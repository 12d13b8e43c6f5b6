"""verify_table reads a Delta table through its log and finds duplicated, missing and unexpected offsets.

Every table here is a real Delta table in tmp_path, committed the way the stream commits it
(:class:`DeltaSink`: plan, Parquet files in the batch folder, commit); damage is done through delta-rs
(a second commit of the same rows) or on disk (a deleted or rewritten file).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.parquet as pq  # type: ignore[import-untyped, unused-ignore]
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.transaction import AddAction, RemoveAction

from streamwarden.stream.sink.delta_sink import CommitResult, DeltaSink
from streamwarden.tables.location import SESSION_ROWS, TableLocation
from streamwarden.tables.ranges import OffsetRanges
from streamwarden.tables.statistics import file_statistics
from streamwarden.testing.exactly_once import READERS, DuplicateOffset, Reader, verify_table

SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                    ("value", pa.string()), ("source_topic", pa.string())])
PARTITION_BY = ["source_topic"]
# "007" would become the integer 7 if a reader inferred types from folder names
RANGES: OffsetRanges = {"sites-a": {0: (0, 120), 1: (0, 50)}, "007": {0: (0, 30)}}
MORE: OffsetRanges = {"sites-a": {0: (120, 160)}, "007": {0: (30, 35)}}
BOTH = {"sites-a": {0: (0, 160), 1: (0, 50)}, "007": {0: (0, 35)}}


def sink_at(root: Path) -> DeltaSink:
    return DeltaSink(TableLocation(root.name, root, {}), SCHEMA, PARTITION_BY)


def rows(topic: str, partition: int, start: int, end: int) -> pa.Table:
    """The rows of offsets ``[start, end)`` as Spark writes them (no partition column in the file)."""
    return pa.table({"topic": pa.array([topic] * (end - start), pa.string()),
                     "partition": pa.array([partition] * (end - start), pa.int32()),
                     "offset": pa.array(np.arange(start, end, dtype=np.int64)),
                     "value": pa.array([f"v{o}" for o in range(start, end)], pa.string())})


def write_batch(sink: DeltaSink, ranges: OffsetRanges, batch_id: int) -> Path:
    """Plan the batch and write its files (two per topic-partition), without committing them."""
    plan = sink.plan(ranges, batch_id)
    for topic, parts in plan.covers.items():
        folder = Path(plan.write_dir) / f"source_topic={topic}"
        folder.mkdir(parents=True, exist_ok=True)
        for partition, intervals in parts.items():
            for start, end in intervals:
                middle = (start + end) // 2
                pq.write_table(rows(topic, partition, start, middle), folder / f"part-{partition}-{start}-a.parquet")
                pq.write_table(rows(topic, partition, middle, end), folder / f"part-{partition}-{start}-b.parquet")
    return Path(plan.write_dir)


def commit_batch(sink: DeltaSink, ranges: OffsetRanges, batch_id: int) -> CommitResult:
    plan = sink.plan(ranges, batch_id)
    write_batch(sink, ranges, batch_id)
    return sink.commit(plan)


def add_files(root: Path, files: list[Path]) -> int:
    """Commit ``files`` (under ``root``) with plain delta-rs, as another writer would: no app transaction."""
    table = DeltaTable(str(root))
    actions: list[AddAction | RemoveAction] = [AddAction(f.relative_to(root).as_posix(), f.stat().st_size,
                         {"source_topic": f.parent.name.split("=", 1)[1]}, int(f.stat().st_mtime * 1000), True,
                         json.dumps(file_statistics(f))) for f in files]
    table.create_write_transaction(actions, mode="append", schema=SCHEMA, partition_by=PARTITION_BY)
    table.update_incremental()
    return table.version()


def committed_files(root: Path) -> list[Path]:
    return sorted(Path(uri) for uri in DeltaTable(str(root)).file_uris())


@pytest.fixture()
def table(tmp_path: Path) -> Path:
    """A Delta table holding exactly RANGES, committed by the sink in one batch (version 1)."""
    root = tmp_path / SESSION_ROWS
    result = commit_batch(sink_at(root), RANGES, 0)
    assert (result.version, result.rows, result.files) == (1, 200, 6)
    return root


def _as_sets(ranges: OffsetRanges) -> dict[str, dict[int, set[int]]]:
    return {t: {p: set(range(*i)) for p, i in parts.items()} for t, parts in ranges.items()}


@pytest.mark.parametrize("reader", READERS)
def test_clean_table_passes(table: Path, reader: Reader) -> None:
    report = verify_table(table, RANGES, reader=reader)
    assert report.ok, report.summary()
    assert report.version == 1 and report.rows == 200 and report.duplicates == 0
    assert report.rows_per_partition == {"sites-a": {0: 120, 1: 50}, "007": {0: 30}}
    assert report.summary().startswith("OK:") and "version 1" in report.summary()
    assert verify_table(table, _as_sets(RANGES), reader=reader).ok


def test_the_readers_agree_on_a_damaged_table(table: Path) -> None:
    victim, original = committed_files(table)[0], committed_files(table)[-1]
    copy = table / "copied" / original.parent.name / "copy.parquet"
    copy.parent.mkdir(parents=True)
    shutil.copy(original, copy)
    add_files(table, [copy])
    victim.unlink()
    reports = [verify_table(table, RANGES, reader=reader) for reader in READERS]
    findings = {repr((r.rows, r.rows_per_partition, r.duplicates, r.duplicate_examples, r.missing_count, r.missing,
                      r.unexpected_count, r.problems, r.version)) for r in reports}
    assert len(findings) == 1, findings
    assert not reports[0].ok and reports[0].duplicates > 0 and reports[0].missing_count > 0


@pytest.mark.parametrize("reader", READERS)
def test_the_same_rows_committed_twice_are_duplicates(table: Path, reader: Reader) -> None:
    original = next(f for f in committed_files(table) if "sites-a" in f.parent.name)
    copy = table / "replayed" / original.parent.name / original.name
    copy.parent.mkdir(parents=True)
    shutil.copy(original, copy)
    assert add_files(table, [copy]) == 2
    copied = pq.read_table(original)
    report = verify_table(table, RANGES, reader=reader)
    assert not report.ok and report.version == 2
    assert report.duplicates == copied.num_rows and report.rows == 200 + copied.num_rows
    assert report.missing_count == 0 and report.unexpected_count == 0
    assert report.problems == []  # the copy holds committed offsets only: the log itself is consistent
    first = report.duplicate_examples[0]
    partition, offset = copied.column("partition")[0].as_py(), copied.column("offset")[0].as_py()
    assert first == DuplicateOffset("sites-a", partition, offset, 2)
    assert "FAILED" in report.summary() and "duplicate" in report.summary()
    assert len(report.duplicate_examples) == 10  # examples are capped (max_examples), the count is exact


def test_duplicates_are_found_without_expected_offsets_or_log_checks(table: Path) -> None:
    original = committed_files(table)[0]
    copy = table / "again" / original.parent.name / "copy.parquet"
    copy.parent.mkdir(parents=True)
    shutil.copy(original, copy)
    add_files(table, [copy])
    report = verify_table(table, check_log=False)
    assert report.duplicates == pq.read_metadata(original).num_rows and report.problems == [] and not report.ok


def test_missing_and_unexpected_offsets_against_expected(table: Path) -> None:
    expected = {"sites-a": {0: (0, 100), 1: (10, 60)}, "sites-c": {0: (0, 3)}}
    report = verify_table(table, expected)
    assert report.unexpected == {"sites-a": {0: [(100, 120)], 1: [(0, 10)]}, "007": {0: [(0, 30)]}}
    assert report.unexpected_count == 20 + 10 + 30
    assert report.missing == {"sites-a": {1: [(50, 60)]}, "sites-c": {0: [(0, 3)]}} and report.missing_count == 13
    assert report.problems == [] and not report.ok
    assert "13 missing offset(s)" in report.summary() and "60 unexpected offset(s)" in report.summary()


def test_expected_as_sets_finds_a_gap(table: Path) -> None:
    expected = _as_sets(RANGES)
    expected["sites-a"][0] = expected["sites-a"][0] - {7, 8}  # e.g. a compacted topic's gap
    report = verify_table(table, expected)
    assert report.unexpected == {"sites-a": {0: [(7, 9)]}} and report.missing_count == 0


@pytest.mark.parametrize("reader", READERS)
def test_a_file_deleted_from_disk_is_a_problem_and_its_offsets_missing(table: Path, reader: Reader) -> None:
    victim = next(f for f in committed_files(table) if "sites-a" in f.parent.name)
    lost = pq.read_table(victim).column("offset").to_pylist()
    partition = pq.read_table(victim).column("partition")[0].as_py()
    victim.unlink()
    report = verify_table(table, RANGES, reader=reader)
    assert not report.ok and report.missing_count == len(lost) and report.rows == 200 - len(lost)
    assert report.missing == {"sites-a": {partition: [(min(lost), max(lost) + 1)]}}
    assert len(report.problems) == 1
    assert "1 of 6 file(s) the log lists at version 1 are missing" in report.problems[0]
    assert victim.relative_to(table).as_posix() in report.problems[0]


def test_a_rewritten_file_differs_in_size_from_the_log(table: Path) -> None:
    victim = committed_files(table)[0]
    pq.write_table(pq.read_table(victim).slice(0, 1), victim)
    report = verify_table(table, RANGES)
    assert any("differ in size from the log" in p for p in report.problems) and not report.ok


@pytest.mark.parametrize("reader", READERS)
def test_files_no_commit_lists_are_invisible(table: Path, reader: Reader) -> None:
    sink = sink_at(table)
    crashed = write_batch(sink, MORE, 1)  # a batch that crashed before its commit
    stray = table / "batch-stray" / "source_topic=sites-a"
    stray.mkdir(parents=True)
    pq.write_table(rows("sites-a", 0, 0, 120), stray / "part-0.parquet")  # would duplicate every offset
    assert any(crashed.rglob("*.parquet"))
    report = verify_table(table, RANGES, reader=reader)
    assert report.ok, report.summary()
    assert report.rows == 200 and report.version == 1


@pytest.mark.parametrize("reader", READERS)
def test_an_older_version_is_read_as_it_was(table: Path, reader: Reader) -> None:
    assert commit_batch(sink_at(table), MORE, 1).version == 2
    newest = verify_table(table, BOTH, reader=reader)
    assert newest.ok and newest.version == 2 and newest.rows == 245, newest.summary()
    old = verify_table(table, RANGES, reader=reader, version=1)
    assert old.ok and old.version == 1 and old.rows == 200, old.summary()
    behind = verify_table(table, BOTH, reader=reader, version=1)
    assert behind.missing == {"sites-a": {0: [(120, 160)]}, "007": {0: [(30, 35)]}} and behind.missing_count == 45
    assert behind.problems == []


def test_rows_outside_the_committed_runs_are_a_problem(table: Path) -> None:
    folder = table / "foreign" / "source_topic=sites-a"
    folder.mkdir(parents=True)
    pq.write_table(rows("sites-a", 0, 120, 130), folder / "part-0.parquet")
    add_files(table, [folder / "part-0.parquet"])  # committed without recording its offsets
    report = verify_table(table, {**RANGES, "sites-a": {0: (0, 130), 1: (0, 50)}})
    assert report.duplicates == 0 and report.missing_count == 0 and report.unexpected_count == 0
    (problem,) = report.problems
    assert problem.startswith("10 offset(s) have rows but lie outside the committed runs")
    assert "sites-a/0[120,130)" in problem
    assert verify_table(table, check_log=False).ok


def test_a_table_written_without_the_sink_needs_check_log_off(tmp_path: Path) -> None:
    root = tmp_path / "plain"
    write_deltalake(str(root), rows("t", 0, 0, 5).append_column("source_topic", pa.array(["t"] * 5)),
                    partition_by=PARTITION_BY)
    assert verify_table(root, {"t": {0: (0, 5)}}, check_log=False).ok
    report = verify_table(root, {"t": {0: (0, 5)}})
    assert not report.ok and "t/0[0,5)" in report.problems[0]


@pytest.mark.parametrize("reader", READERS)
def test_absent_or_empty_table_reads_as_empty(tmp_path: Path, reader: Reader) -> None:
    nothing = tmp_path / "nothing"
    report = verify_table(nothing, reader=reader)
    assert report.ok and report.rows == 0 and report.version is None
    assert "no Delta table" in report.summary()
    report = verify_table(nothing, {"t": {0: (0, 2)}}, reader=reader)
    assert report.rows == 0 and report.missing_count == 2 and not report.ok
    created = tmp_path / "created"
    sink_at(created)  # the stream creates its tables at start, before the first batch
    report = verify_table(created, reader=reader)
    assert report.ok and report.rows == 0 and report.version == 0


def test_a_folder_in_the_manifest_layout_is_a_problem(tmp_path: Path) -> None:
    (tmp_path / "old" / "_manifests").mkdir(parents=True)
    report = verify_table(tmp_path / "old")
    assert not report.ok and "manifest layout" in report.problems[0]


def test_an_unknown_reader_is_refused(table: Path) -> None:
    with pytest.raises(ValueError, match="unknown reader 'pyarrow'"):
        verify_table(table, reader="pyarrow")  # type: ignore[arg-type]


def test_two_million_rows_are_checked_quickly(tmp_path: Path) -> None:
    count = 2_000_000
    root = tmp_path / "big"
    sink = sink_at(root)
    plan = sink.plan({"big": {0: (0, count)}}, 0)
    offsets = np.arange(count, dtype=np.int64)
    offsets[-1] = 5  # one duplicate, one missing offset
    folder = Path(plan.write_dir) / "source_topic=big"
    folder.mkdir(parents=True)
    pq.write_table(pa.table({"topic": pa.array(["big"] * count, pa.string()),
                             "partition": pa.array(np.zeros(count, np.int32)), "offset": offsets,
                             "value": pa.nulls(count, pa.string())}), folder / "part-0.parquet")
    sink.commit(plan)
    started = time.perf_counter()
    report = verify_table(root, {"big": {0: (0, count)}})
    assert time.perf_counter() - started < 5
    assert report.duplicates == 1 and report.duplicate_examples == [DuplicateOffset("big", 0, 5, 2)]
    assert report.missing == {"big": {0: [(count - 1, count)]}} and report.unexpected_count == 0
    assert report.problems == []
