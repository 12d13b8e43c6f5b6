"""verify_table reads a table like an outside reader and finds duplicated, missing and unexpected offsets."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.parquet as pq  # type: ignore[import-untyped, unused-ignore]
import pytest
from test_commit_protocol import RANGES, TABLE, commit_batch, fresh  # type: ignore[import-not-found, unused-ignore]

from streamwarden.validation.exactly_once import DuplicateOffset, Reader, verify_table

READERS: list[Reader] = ["pyarrow", "duckdb"]


@pytest.fixture()
def table(tmp_path: Path) -> Path:
    """A committed table holding exactly RANGES."""
    commit_batch(fresh(tmp_path), RANGES)
    root: Path = tmp_path / TABLE
    return root


def _files(table: Path) -> list[Path]:
    return sorted(p for p in table.rglob("*.parquet") if "_manifests" not in p.parts)


@pytest.mark.parametrize("reader", READERS)
def test_clean_table_passes(table: Path, reader: Reader) -> None:
    report = verify_table(table, RANGES, reader=reader)
    assert report.ok, report.summary()
    assert report.rows == 200 and report.duplicates == 0
    assert report.rows_per_partition == {"sites-a": {0: 120, 1: 50}, "sites-b": {0: 30}}
    assert report.summary().startswith("OK:")
    sets = {t: {p: set(range(*i)) for p, i in parts.items()} for t, parts in RANGES.items()}
    assert verify_table(table, sets, reader=reader).ok


@pytest.mark.parametrize("reader", READERS)
def test_a_file_copied_twice_fails(table: Path, reader: Reader) -> None:
    original = _files(table)[0]
    shutil.copy(original, original.with_name("copy-of-a-part.parquet"))
    copied = pq.read_table(original).num_rows
    report = verify_table(table, RANGES, reader=reader)
    assert not report.ok
    assert report.duplicates == copied and report.missing_count == 0 and report.unexpected_count == 0
    assert report.rows == 200 + copied
    first = report.duplicate_examples[0]
    assert first == DuplicateOffset("sites-a", 0, first.offset, 2)
    assert any("in no manifest" in p for p in report.problems)
    assert "FAILED" in report.summary() and "duplicate" in report.summary()


def test_duplicates_are_found_without_manifest_checks(table: Path) -> None:
    original = _files(table)[0]
    shutil.copy(original, original.with_name("copy.parquet"))
    report = verify_table(table, check_manifests=False)
    assert report.duplicates > 0 and report.problems == [] and not report.ok


@pytest.mark.parametrize("reader", READERS)
def test_deleted_file_shows_missing_offsets_and_a_manifest_problem(table: Path, reader: Reader) -> None:
    victim = _files(table)[0]
    lost = pq.read_table(victim).column("offset").to_pylist()
    victim.unlink()
    report = verify_table(table, RANGES, reader=reader)
    assert not report.ok and report.missing_count == len(lost)
    shown = report.missing["sites-a"][0]
    assert len(shown) == 10  # examples are capped (max_examples), the count is exact
    assert all(o in lost for s, e in shown for o in range(s, e))
    assert any("has no file" in p for p in report.problems)


def test_unexpected_offsets_and_missing_partitions(table: Path) -> None:
    expected = {"sites-a": {0: (0, 100), 1: (10, 60)}, "sites-c": {0: (0, 3)}}
    report = verify_table(table, expected)
    assert report.unexpected == {"sites-a": {0: [(100, 120)]}, "sites-b": {0: [(0, 30)]}}
    assert report.unexpected_count == 50
    assert report.missing == {"sites-c": {0: [(0, 3)]}} and report.missing_count == 3


def test_manifest_row_count_must_match_the_file(table: Path) -> None:
    victim = _files(table)[0]
    pq.write_table(pq.read_table(victim).slice(0, 1), victim)
    report = verify_table(table)
    assert any("manifest says" in p for p in report.problems) and not report.ok


def test_corrupt_manifest_is_a_problem_not_a_crash(table: Path) -> None:
    manifest = next((table / "_manifests").glob("*.json"))
    manifest.write_text(json.dumps({"version": 1}))
    report = verify_table(table, RANGES)
    assert not report.ok and any("malformed" in p for p in report.problems)


@pytest.mark.parametrize("reader", READERS)
def test_empty_or_absent_table(tmp_path: Path, reader: Reader) -> None:
    assert verify_table(tmp_path / "nothing", reader=reader).ok
    report = verify_table(tmp_path / "nothing", {"t": {0: (0, 2)}}, reader=reader)
    assert report.rows == 0 and report.missing_count == 2 and not report.ok


@pytest.mark.parametrize("reader", READERS)
def test_numeric_looking_topic_stays_a_string(tmp_path: Path, reader: Reader) -> None:
    folder = tmp_path / "t" / "topic=007"
    folder.mkdir(parents=True)
    rows = pa.table({"partition": pa.array([0, 0], pa.int32()), "offset": pa.array([0, 1], pa.int64())})
    pq.write_table(rows, folder / "part-0.parquet")
    report = verify_table(tmp_path / "t", {"007": {0: (0, 2)}}, reader=reader, check_manifests=False)
    assert report.ok, report.summary()


def test_two_million_rows_are_checked_quickly(tmp_path: Path) -> None:
    count = 2_000_000
    offsets = np.arange(count, dtype=np.int64)
    offsets[-1] = 5  # one duplicate, one missing offset
    folder = tmp_path / "big" / "topic=big"
    folder.mkdir(parents=True)
    pq.write_table(pa.table({"partition": pa.array(np.zeros(count, np.int32)), "offset": offsets}),
                   folder / "part-0.parquet")
    started = time.perf_counter()
    report = verify_table(tmp_path / "big", {"big": {0: (0, count)}}, check_manifests=False)
    assert time.perf_counter() - started < 10
    assert report.duplicates == 1 and report.duplicate_examples == [DuplicateOffset("big", 0, 5, 2)]
    assert report.missing == {"big": {0: [(count - 1, count)]}} and report.unexpected_count == 0
