"""Offset reconciliation (checks 1 and 2) on real Delta tables committed by the real DeltaSink, without Spark.

Damage is done the way it happens: a committed file dropped from the log by a RemoveAction commit, a file
committed a second time by another writer (no app transaction), rows of an offset in the wrong table, a
checkpoint moved past the tables, a table that missed a batch.
"""

from __future__ import annotations

import hashlib
import json
import stat
from pathlib import Path

import pyarrow.parquet as pq  # type: ignore[import-untyped, unused-ignore]
import pytest

from fixtures.stream_output import (
    add_copy,
    commit_batch,
    committed_paths,
    remove_file,
    rows_at,
    rows_for,
    settings_for,
    table_root,
    write_checkpoint,
)
from streamwarden.settings import Settings, load_settings
from streamwarden.settings_loading import SettingsError
from streamwarden.tables.location import QUARANTINE, RECORDS, SESSION_ROWS
from streamwarden.tables.ranges import OffsetRanges
from streamwarden.validation.findings import Finding, FindingClass
from streamwarden.validation.report import LAST_VALIDATED, last_validated
from streamwarden.validation.request import Check, ValidationRequest
from streamwarden.validation.settings import ValidationSettings, load_validation_settings
from streamwarden.validation.steps import Recorded, run, validate

BATCH_0: OffsetRanges = {"sites-a": {0: (0, 100), 1: (0, 40)}, "sites-b": {0: (0, 30)}}
BATCH_1: OffsetRanges = {"sites-a": {0: (100, 150), 1: (40, 40)}, "sites-b": {0: (30, 33)}}
BATCH_2: OffsetRanges = {"sites-a": {0: (150, 170), 1: (40, 45)}, "sites-b": {0: (33, 33)}}
BOTH = f"{SESSION_ROWS}+{QUARANTINE}"
OFFLINE = ValidationSettings(kafka=False)


def pinned(versions: dict[str, int]) -> ValidationRequest:
    return ValidationRequest((SESSION_ROWS, QUARANTINE), frozenset(Check), versions)


@pytest.fixture()
def settings(tmp_path: Path) -> Settings:
    """Both tables holding batches 0 and 1 (versions 2), and a checkpoint that committed both."""
    settings = settings_for(tmp_path)
    commit_batch(settings, BATCH_0, 0)
    commit_batch(settings, BATCH_1, 1)
    write_checkpoint(settings, [BATCH_0, BATCH_1])
    return settings


def of_class(recorded: Recorded | object, finding_class: FindingClass) -> list[Finding]:
    report = recorded.report if isinstance(recorded, Recorded) else recorded
    return [f for f in report.findings if f.finding_class is finding_class]  # type: ignore[attr-defined]


def file_of(settings: Settings, table: str, topic: str, name: str) -> str:
    (path,) = [p for p in committed_paths(settings, table) if f"source_topic={topic}/" in p and p.endswith(name)]
    return path


def test_clean_tables_pass_and_their_versions_are_recorded(settings: Settings) -> None:
    recorded = run(settings, OFFLINE)
    report = recorded.report
    assert report.passed and report.findings == (), report.text()
    assert report.versions == {SESSION_ROWS: 2, QUARANTINE: 2}
    figures = {(p.topic, p.partition): p for p in report.partitions}
    assert figures[("sites-a", 0)].claimed == ((0, 150),)
    assert figures[("sites-a", 0)].offsets == {SESSION_ROWS: 120, QUARANTINE: 30}
    assert figures[("sites-a", 0)].rows == {SESSION_ROWS: 360, QUARANTINE: 30}
    assert figures[("sites-b", 0)].claimed == ((0, 33),) and figures[("sites-a", 1)].claimed == ((0, 40),)
    assert report.checkpoint is not None and report.checkpoint.committed_batch == 1
    assert "passed" in report.text().splitlines()[-1] and "sites-a" in report.text()
    folder = settings.run_paths.validation
    assert recorded.path.parent == folder and recorded.path.name.endswith("Z.json")
    assert stat.S_IMODE(recorded.path.stat().st_mode) == 0o600
    written = json.loads(recorded.path.read_text())
    assert written["passed"] and written["versions"] == {SESSION_ROWS: 2, QUARANTINE: 2}
    assert written == json.loads(json.dumps(report.to_json()))
    validated = last_validated(folder)
    assert validated is not None and validated["tables"][SESSION_ROWS]["version"] == 2
    assert validated["tables"][QUARANTINE]["report"] == recorded.path.name
    assert stat.S_IMODE((folder / LAST_VALIDATED).stat().st_mode) == 0o600


def test_a_file_removed_from_the_log_is_a_gap(settings: Settings) -> None:
    run(settings, OFFLINE)  # versions 2 validated
    victim = file_of(settings, SESSION_ROWS, "sites-a", "part-0-50-b.zstd.parquet")  # offsets [50, 100)
    lost = sorted(set(pq.read_table(table_root(settings, SESSION_ROWS) / victim).column("offset").to_pylist()))
    assert remove_file(settings, SESSION_ROWS, victim) == 3
    recorded = run(settings, OFFLINE)
    (gap,) = of_class(recorded, FindingClass.GAP)
    assert (gap.table, gap.topic, gap.partition, gap.count) == (BOTH, "sites-a", 0, len(lost))
    assert gap.ranges[0] == (51, 55) and len(gap.ranges) == OFFLINE.max_ranges  # quarantined offsets hold
    assert all(o in lost for s, e in gap.ranges for o in range(s, e))
    assert "no table holds a row" in gap.detail and "recover_stream" in gap.next_action
    assert not recorded.report.passed and recorded.report.versions[SESSION_ROWS] == 3
    assert recorded.last_validated is None
    validated = last_validated(settings.run_paths.validation)
    assert validated is not None and validated["tables"][SESSION_ROWS]["version"] == 2  # unchanged
    assert "FAILED GAP 1" in recorded.report.text()
    again = run(settings, OFFLINE, pinned({SESSION_ROWS: 1, QUARANTINE: 1}))  # an older version, still sound
    assert again.report.passed and again.report.checkpoint is None and again.last_validated is not None
    assert again.last_validated["tables"][SESSION_ROWS]["version"] == 2  # the newest passing version stays


@pytest.mark.parametrize(("damage", "finding_class", "fault"), [
    ("deleted", FindingClass.STORAGE, "missing"), ("truncated", FindingClass.STORAGE, "truncated"),
    ("one byte changed", FindingClass.INTEGRITY, "changed")])
def test_a_file_gone_cut_short_or_changed_in_storage_is_a_finding_with_its_offsets_and_a_gap(
        settings: Settings, damage: str, finding_class: FindingClass, fault: str) -> None:
    victim = file_of(settings, SESSION_ROWS, "sites-a", "part-0-50-b.zstd.parquet")  # partition 0, offsets [50, 100)
    path = table_root(settings, SESSION_ROWS) / victim
    size = path.stat().st_size
    lost = sorted(set(pq.read_table(path).column("offset").to_pylist()))
    recorded_digest = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    if damage == "deleted":
        path.unlink()
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[: size // 2])
    else:
        data = bytearray(path.read_bytes())
        data[size // 2] ^= 0x01
        path.write_bytes(bytes(data))
    recorded = run(settings, OFFLINE)  # no BUG from deep inside a reader: findings
    (storage,) = of_class(recorded, finding_class)
    assert (storage.table, storage.topic, storage.partition) == (SESSION_ROWS, "sites-a", 0)
    assert storage.ranges == ((min(lost), max(lost) + 1),) and storage.count > 0
    assert f"data file {victim} of {SESSION_ROWS} (listed at version 2" in storage.detail
    if damage == "one byte changed":
        assert f"is changed in storage ({recorded_digest} recorded at its commit, sha256:" in storage.detail
    else:
        assert f"is {fault} in storage ({size:,} bytes in the log" in storage.detail
    assert storage.written_at is not None and "recover_stream with as_of" in storage.next_action
    (gap,) = of_class(recorded, FindingClass.GAP)  # the rows it held, exactly
    assert (gap.topic, gap.partition) == ("sites-a", 0)
    assert all(o in lost for s, e in gap.ranges for o in range(s, e))
    assert not recorded.report.passed and recorded.last_validated is None
    assert f"FAILED GAP 1, {finding_class.value} 1" in recorded.report.text()


def test_a_file_committed_twice_is_a_duplicate(settings: Settings) -> None:
    copied = file_of(settings, QUARANTINE, "sites-a", "part-1-0-a.zstd.parquet")  # offsets 0, 5, 10, 15
    add_copy(settings, QUARANTINE, copied)
    copied_session = file_of(settings, SESSION_ROWS, "sites-b", "part-0-0-a.zstd.parquet")  # [0, 15) minus 0, 5, 10
    add_copy(settings, SESSION_ROWS, copied_session)
    report = validate(settings, OFFLINE)
    by_table = {f.table: f for f in of_class(report, FindingClass.DUPLICATE)}
    assert set(by_table) == {QUARANTINE, SESSION_ROWS} and not of_class(report, FindingClass.GAP)
    quarantine = by_table[QUARANTINE]
    assert (quarantine.topic, quarantine.partition, quarantine.count) == ("sites-a", 1, 4)
    assert quarantine.ranges == ((0, 1), (5, 6), (10, 11), (15, 16))
    session = by_table[SESSION_ROWS]
    assert (session.topic, session.partition, session.count) == ("sites-b", 0, 12 * 3)  # every row of 12 offsets
    assert session.ranges == ((1, 5), (6, 10), (11, 15))
    assert "offset and row key" in session.detail


def test_an_offset_in_both_tables_is_a_duplicate(settings: Settings) -> None:
    folder = table_root(settings, QUARANTINE) / "foreign" / "source_topic=sites-a"
    folder.mkdir(parents=True)
    pq.write_table(rows_at(QUARANTINE, "sites-a", 0, [1, 2, 3]), folder / "part-x.parquet")  # session_rows' offsets
    add_copy(settings, QUARANTINE, "foreign/source_topic=sites-a/part-x.parquet", folder="again")
    findings = of_class(validate(settings, OFFLINE), FindingClass.DUPLICATE)
    both = [f for f in findings if f.table == BOTH]
    assert len(both) == 1 and (both[0].topic, both[0].partition, both[0].ranges, both[0].count) == (
        "sites-a", 0, ((1, 4),), 3)
    assert "more than one" in both[0].detail


def test_rows_the_log_does_not_claim_are_found(settings: Settings) -> None:
    root = table_root(settings, SESSION_ROWS)
    folder = root / "foreign" / "source_topic=sites-a"
    folder.mkdir(parents=True)
    pq.write_table(rows_for(SESSION_ROWS, "sites-a", 0, 150, 160), folder / "part-y.parquet")
    add_copy(settings, SESSION_ROWS, "foreign/source_topic=sites-a/part-y.parquet", folder="again")
    (unclaimed,) = of_class(validate(settings, OFFLINE), FindingClass.DUPLICATE)
    assert (unclaimed.table, unclaimed.topic, unclaimed.partition) == (SESSION_ROWS, "sites-a", 0)
    assert unclaimed.ranges == ((151, 155), (156, 160)) and unclaimed.count == 8
    assert "does not claim" in unclaimed.detail


def test_a_checkpoint_past_the_tables_is_a_mismatch(settings: Settings) -> None:
    write_checkpoint(settings, [BATCH_0, BATCH_1, BATCH_2])  # batch 2 committed in the checkpoint only
    report = validate(settings, OFFLINE)
    mismatches = of_class(report, FindingClass.CHECKPOINT_MISMATCH)
    assert {(f.table, f.topic, f.partition, f.ranges, f.count) for f in mismatches} == {
        (table, "sites-a", p, (r,), r[1] - r[0]) for table in (SESSION_ROWS, QUARANTINE)
        for p, r in ((0, (150, 170)), (1, (40, 45)))}
    assert all("will not read" in f.detail for f in mismatches) and len(report.findings) == 4


def test_the_batch_in_flight_is_allowed(settings: Settings) -> None:
    write_checkpoint(settings, [BATCH_0, BATCH_1, BATCH_2], committed=1)  # batch 2 planned, not committed
    assert validate(settings, OFFLINE).passed  # neither table has it yet
    commit_batch(settings, BATCH_2, 2, tables=(SESSION_ROWS,))  # one table has it, the other not yet
    report = validate(settings, OFFLINE)
    assert report.passed, report.text()
    assert {p.claimed for p in report.partitions if p.topic == "sites-a"} == {((0, 150),), ((0, 40),)}
    write_checkpoint(settings, [BATCH_0, BATCH_1, BATCH_2])  # committed, yet quarantine lacks it
    (mismatch, other) = of_class(validate(settings, OFFLINE), FindingClass.CHECKPOINT_MISMATCH)
    assert {mismatch.table, other.table} == {QUARANTINE}


def test_tables_past_the_checkpoint_are_a_mismatch(settings: Settings) -> None:
    write_checkpoint(settings, [BATCH_0])  # e.g. a checkpoint restored from a backup
    mismatches = of_class(validate(settings, OFFLINE), FindingClass.CHECKPOINT_MISMATCH)
    assert {(f.table, f.topic, f.partition, f.ranges) for f in mismatches} == {
        (table, topic, 0, ((start, end),)) for table in (SESSION_ROWS, QUARANTINE)
        for topic, start, end in (("sites-a", 100, 150), ("sites-b", 30, 33))}
    assert all("past anything the checkpoint planned" in f.detail for f in mismatches)


def test_a_batch_one_table_missed_below_the_other_is_a_gap(settings: Settings) -> None:
    commit_batch(settings, BATCH_2, 2, tables=(SESSION_ROWS,))
    later: OffsetRanges = {"sites-a": {0: (170, 180), 1: (45, 45)}, "sites-b": {0: (33, 33)}}
    commit_batch(settings, later, 3)  # quarantine opens a second run at 170
    write_checkpoint(settings, [BATCH_0, BATCH_1, BATCH_2, later])
    report = validate(settings, OFFLINE)
    (gap,) = of_class(report, FindingClass.GAP)  # below offset 180, which both tables hold
    assert (gap.table, gap.topic, gap.partition, gap.ranges, gap.count) == (QUARANTINE, "sites-a", 0, ((150, 170),), 20)
    assert "does not claim" in gap.detail
    (behind,) = of_class(report, FindingClass.CHECKPOINT_MISMATCH)  # the newest offsets of sites-a[1]
    assert (behind.table, behind.topic, behind.partition, behind.ranges) == (QUARANTINE, "sites-a", 1, ((40, 45),))


def test_a_partition_without_rows_is_found_through_the_checkpoint(settings: Settings) -> None:
    for table in (SESSION_ROWS, QUARANTINE):
        for path in [p for p in committed_paths(settings, table) if "source_topic=sites-b/" in p]:
            remove_file(settings, table, path)
    report = validate(settings, OFFLINE)
    (gap,) = of_class(report, FindingClass.GAP)
    assert (gap.topic, gap.partition, gap.ranges, gap.count) == ("sites-b", 0, ((0, 33),), 33)
    assert report.versions == {SESSION_ROWS: 5, QUARANTINE: 5}  # one commit per file removed


def test_without_a_checkpoint_or_tables_the_checks_say_what_they_skipped(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    report = validate(settings, OFFLINE)
    assert report.passed and report.versions == {} and report.partitions == ()
    assert any("no Delta table yet" in n for n in report.notes)
    assert any("check 2 skipped" in n for n in report.notes)
    assert "check kafka skipped: STREAMWARDEN_VALIDATION_KAFKA=false" in report.notes
    assert "(no topic-partition in the tables yet)" in report.text()


def test_records_pipeline_has_one_table(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, pipeline="records")
    commit_batch(settings, BATCH_0, 0, tables=(RECORDS,))
    commit_batch(settings, BATCH_1, 1, tables=(RECORDS,))
    write_checkpoint(settings, [BATCH_0, BATCH_1])
    clean = validate(settings, OFFLINE)
    assert clean.passed and clean.versions == {RECORDS: 2}, clean.text()
    assert {p.offsets[RECORDS] for p in clean.partitions} == {150, 40, 33}
    remove_file(settings, RECORDS, file_of(settings, RECORDS, "sites-b", "part-0-15-b.zstd.parquet"))
    (gap,) = of_class(validate(settings, OFFLINE), FindingClass.GAP)
    assert (gap.table, gap.topic, gap.partition, gap.ranges, gap.count) == (RECORDS, "sites-b", 0, ((15, 30),), 15)


def test_validation_settings_have_their_own_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMWARDEN_VALIDATION_KAFKA", "false")
    monkeypatch.setenv("STREAMWARDEN_VALIDATION_STALE_AFTER", "5m")
    load_settings()  # the stream's loader leaves the validation variables to their own loader
    loaded = load_validation_settings()
    assert loaded.kafka is False and loaded.stale_after == 300 and loaded.row_key_columns == ("row_id",)
    monkeypatch.setenv("STREAMWARDEN_VALIDATION_STALE_AFTR", "5m")
    with pytest.raises(SettingsError, match="STREAMWARDEN_VALIDATION_STALE_AFTER"):
        load_validation_settings()


def test_findings_and_the_report_survive_json(settings: Settings) -> None:
    remove_file(settings, SESSION_ROWS, file_of(settings, SESSION_ROWS, "sites-a", "part-0-50-b.zstd.parquet"))
    report = validate(settings, OFFLINE)
    document = json.loads(json.dumps(report.to_json()))
    assert document["passed"] is False and document["classes"] == {"GAP": 1}
    assert [Finding.from_json(f) for f in document["findings"]] == list(report.findings)
    (finding,) = document["findings"]
    assert finding["class"] == "GAP" and finding["next_action"] == report.findings[0].next_action
    assert document["checkpoint"]["committed"] == {"sites-a": {"0": 150, "1": 40}, "sites-b": {"0": 33}}
    lines = report.text().splitlines()
    assert lines[0].split() == ["topic", "partition", "claimed", "session_rows", "offsets", "quarantine", "offsets",
                                "gaps", "duplicates", "log", "start", "log", "end", "lag", "expired"]
    assert lines[1].split()[:7] == ["sites-a", "0", "[0,", "150)", "80", "30", "40"]
    assert any(line.startswith("next action (GAP):") for line in lines)
    summary = report.summary(Path("/x/report.json"), max_findings=0)
    assert summary["findings_total"] == 1 and summary["findings"] == [] and summary["report"] == "/x/report.json"
    assert json.loads(json.dumps(summary))["classes"] == {"GAP": 1}


def test_without_the_row_key_columns_a_row_is_keyed_by_all_its_columns(settings: Settings) -> None:
    keyless = ValidationSettings(kafka=False, row_key="handler_row")  # a handler without row_id
    assert validate(settings, keyless).passed  # the rows of one snapshot differ in their values
    add_copy(settings, SESSION_ROWS, file_of(settings, SESSION_ROWS, "sites-b", "part-0-0-a.zstd.parquet"))
    (duplicate,) = validate(settings, keyless).findings
    assert (duplicate.finding_class, duplicate.table, duplicate.count) == (FindingClass.DUPLICATE, SESSION_ROWS, 36)


def test_a_committed_checkpoint_without_tables_is_a_mismatch(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    write_checkpoint(settings, [BATCH_0])
    (settings.checkpoint_location / "streamwarden_initial_offsets.json").write_text(
        json.dumps({"sites-a": {"0": 0, "1": 0}, "sites-b": {"0": 0}}))
    findings = validate(settings, OFFLINE).findings  # e.g. STREAMWARDEN_OUTPUT_ROOT points at a new folder
    assert {(f.finding_class, f.table, f.topic, f.partition, f.ranges) for f in findings} == {
        (FindingClass.CHECKPOINT_MISMATCH, table, topic, partition, ((0, end),)) for table in (SESSION_ROWS, QUARANTINE)
        for topic, parts in BATCH_0.items() for partition, (_, end) in parts.items()}
    assert all("does not exist" in f.detail for f in findings)


def test_without_a_checkpoint_a_table_ahead_by_its_newest_batch_passes(settings: Settings) -> None:
    commit_batch(settings, BATCH_2, 2, tables=(SESSION_ROWS,))
    for folder in ("offsets", "commits"):
        for batch in (settings.checkpoint_location / folder).iterdir():
            batch.unlink()
    report = validate(settings, OFFLINE)
    assert report.passed, report.text()
    assert any("check 2 skipped" in n for n in report.notes)
