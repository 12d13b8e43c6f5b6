"""Check 1's window: after a passing run, a scheduled run reads the offsets above what it checked and the files
written since, finds a gap or a duplicate there as a whole-table run would, and reads every row when a commit
since is not an append or a compaction, or when asked to."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixtures.stream_output import add_copy, remove_file, settings_for, sink, write_checkpoint, write_covers
from streamwarden.settings import Settings
from streamwarden.tables.location import QUARANTINE, SESSION_ROWS
from streamwarden.tables.ranges import OffsetRanges
from streamwarden.validation.findings import FindingClass
from streamwarden.validation.report import ValidationReport, last_validated
from streamwarden.validation.request import Check, Rows, ValidationRequest
from streamwarden.validation.settings import ValidationSettings
from streamwarden.validation.snapshot import pin
from streamwarden.validation.steps import run
from streamwarden.validation.window import Window, choose_window

BATCH_0: OffsetRanges = {"sites-a": {0: (0, 100), 1: (0, 60)}, "sites-b": {0: (0, 30)}}
BATCH_1: OffsetRanges = {"sites-a": {0: (100, 150), 1: (60, 90)}, "sites-b": {0: (30, 40)}}
OFFLINE = ValidationSettings(kafka=False)
WINDOW = "the offsets above those the last validation checked"


def commit(settings: Settings, ranges: OffsetRanges, batch_id: int, drop: str | None = None) -> None:
    """The stream's commit of one batch to both tables; ``drop``: a file name left out of ``session_rows``
    before its commit (its rows never came, its offsets claimed all the same)."""
    for name in (SESSION_ROWS, QUARANTINE):
        table_sink = sink(settings, name)
        plan = table_sink.plan(ranges, batch_id)
        write_covers(Path(plan.write_dir), name, plan.covers)
        if drop is not None and name == SESSION_ROWS:
            for path in Path(plan.write_dir).rglob(drop):
                path.unlink()
        table_sink.commit(plan)


@pytest.fixture()
def validated(tmp_path: Path) -> Settings:
    """Batch 0 in both tables, validated by a passing run."""
    settings = settings_for(tmp_path)
    commit(settings, BATCH_0, 0)
    write_checkpoint(settings, [BATCH_0])
    assert run(settings, OFFLINE).report.passed
    return settings


def again(settings: Settings, ranges: list[OffsetRanges], request: ValidationRequest | None = None
          ) -> ValidationReport:
    write_checkpoint(settings, ranges)
    return run(settings, OFFLINE, request).report


def test_a_run_after_a_passing_one_reads_the_offsets_above_its_floors_and_the_files_written_since(
        validated: Settings) -> None:
    commit(validated, BATCH_1, 1)
    tables = pin(validated, (SESSION_ROWS, QUARANTINE))
    folder = validated.run_paths.validation
    window = choose_window(tables, last_validated(folder), folder)
    assert isinstance(window, Window)
    assert dict(window.floors) == {"sites-a": 60, "sites-b": 30}  # a topic's lowest end validated
    assert {name: len(files) for name, files in window.written.items()} == {SESSION_ROWS: 6, QUARANTINE: 6}
    batch_0 = {str(p) for p in tables[0].paths()} - window.written[SESSION_ROWS]
    left_out = window.leave_out(tables[0])
    assert left_out and left_out < batch_0  # batch 0's files wholly below the floors are not opened

    report = again(validated, [BATCH_0, BATCH_1])
    assert report.passed, report.text()
    assert report.coverage_read.startswith(WINDOW), report.coverage_read
    offsets = {(p.topic, p.partition): sum(p.offsets.values()) for p in report.partitions}
    assert offsets == {("sites-a", 0): 90, ("sites-a", 1): 30, ("sites-b", 0): 10}  # from the floors up
    claimed = {(p.topic, p.partition): p.claimed for p in report.partitions}
    assert claimed[("sites-a", 0)] == ((0, 150),)  # the claims stay whole: the next run's floors


def test_a_batch_written_since_without_some_of_its_rows_is_a_gap(validated: Settings) -> None:
    commit(validated, BATCH_1, 1, drop="part-0-125-b.zstd.parquet")  # sites-a/0 offsets [125, 150)
    report = again(validated, [BATCH_0, BATCH_1])
    assert report.coverage_read.startswith(WINDOW), report.coverage_read
    [gap] = [f for f in report.findings if f.finding_class is FindingClass.GAP]
    assert (gap.topic, gap.partition, gap.count, gap.ranges[0]) == ("sites-a", 0, 20, (126, 130))  # 125: quarantined


def test_offsets_validated_before_and_written_again_since_are_a_duplicate(validated: Settings) -> None:
    commit(validated, BATCH_1, 1)
    [old] = [p for p in pin(validated, (SESSION_ROWS,))[0].paths() if "part-0-0-a" in p and "sites-a" in p]
    add_copy(validated, SESSION_ROWS, old)  # sites-a/0 offsets [0, 50), below the floor: committed again
    report = again(validated, [BATCH_0, BATCH_1])
    assert report.coverage_read.startswith(WINDOW), report.coverage_read
    [duplicate] = [f for f in report.findings if f.finding_class is FindingClass.DUPLICATE]
    assert (duplicate.table, duplicate.topic, duplicate.partition, duplicate.count, duplicate.ranges[0]) == (
        SESSION_ROWS, "sites-a", 0, 40, (1, 5))  # the offsets of session rows (0, 5, ...: quarantined)
    assert "committed again since" in duplicate.detail


def test_a_commit_since_that_removed_files_makes_check_1_read_every_row_and_find_what_it_lost(
        validated: Settings) -> None:
    [old] = [p for p in pin(validated, (SESSION_ROWS,))[0].paths() if "part-0-0-a" in p and "sites-a" in p]
    version = remove_file(validated, SESSION_ROWS, old)
    report = again(validated, [BATCH_0])
    assert report.coverage_read == f"every row: {SESSION_ROWS} version {version} removed files"
    [gap] = [f for f in report.findings if f.finding_class is FindingClass.GAP]
    assert (gap.topic, gap.partition, gap.count, gap.ranges[0]) == ("sites-a", 0, 40, (1, 5))  # below the floor


def test_every_row_when_asked_and_before_any_passing_run(tmp_path: Path, validated: Settings) -> None:
    commit(validated, BATCH_1, 1)
    every = ValidationRequest((SESSION_ROWS, QUARANTINE), frozenset(Check), rows=Rows.ALL)
    report = again(validated, [BATCH_0, BATCH_1], every)
    assert report.passed and report.coverage_read == "every row (`rows=all`)"
    assert sum(sum(p.offsets.values()) for p in report.partitions) == 150 + 90 + 40  # every offset

    fresh = settings_for(tmp_path / "fresh")
    commit(fresh, BATCH_0, 0)
    write_checkpoint(fresh, [BATCH_0])
    first = run(fresh, OFFLINE).report
    assert first.coverage_read == "every row: no validation has passed yet"
    assert "check 1 read: every row: no validation has passed yet" in first.text()
