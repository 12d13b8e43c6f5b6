"""Check 4's count per hour, on real Delta tables, with Kafka's hour boundaries given (the broker's side is in
test_upstream.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import duckdb

from fixtures.stream_output import commit_batch, settings_for, write_checkpoint
from streamwarden.settings import Settings
from streamwarden.tables.location import pipeline_tables
from streamwarden.tables.ranges import OffsetRanges
from streamwarden.validation.audit import Audit, audit
from streamwarden.validation.coverage import Coverage, check_coverage
from streamwarden.validation.findings import FindingClass
from streamwarden.validation.snapshot import pin

H0 = 1_795_460_400  # an hour boundary (epoch seconds)


def audited(settings: Settings, windows: dict[tuple[str, int], tuple[int, int]]) -> tuple[Coverage, Audit]:
    boundaries = {("sites-a", 0): [(H0, 0), (H0 + 3600, 60), (H0 + 7200, 130), (H0 + 10800, 150)]}
    with duckdb.connect() as con:
        coverage = check_coverage(pin(settings, pipeline_tables(settings)), connection=con)
        return coverage, audit(con, boundaries, windows)


def test_hours_the_tables_account_for_in_full_agree(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    commit_batch(settings, {"sites-a": {0: (0, 150)}}, 0)
    coverage, result = audited(settings, {("sites-a", 0): (0, 150)})
    assert coverage.findings == () and result.findings == ()
    assert [(h.first, h.end, h.kafka, h.tables) for h in result.rows] == [(0, 60, 60, 60), (60, 130, 70, 70),
                                                                          (130, 150, 20, 20)]
    assert result.rows[1].hour == datetime.fromtimestamp(H0 + 3600, UTC).isoformat()
    _, partial = audited(settings, {("sites-a", 0): (10, 100)})  # log start 10, the stream read up to 100
    assert [(h.first, h.end, h.kafka, h.tables) for h in partial.rows] == [(10, 60, 50, 50), (60, 100, 40, 40)]


def test_offsets_skipped_without_a_claim_differ_in_their_hour(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    first: OffsetRanges = {"sites-a": {0: (0, 100)}}
    after_restart: OffsetRanges = {"sites-a": {0: (120, 150)}}  # e.g. restarted at `latest`: 100-119 skipped
    commit_batch(settings, first, 0)
    commit_batch(settings, after_restart, 0)
    write_checkpoint(settings, [after_restart])
    coverage, result = audited(settings, {("sites-a", 0): (0, 150)})
    assert coverage.findings == ()  # what the logs claim is all there
    (mismatch,) = result.findings
    assert (mismatch.finding_class, mismatch.topic, mismatch.partition, mismatch.ranges, mismatch.count) == (
        FindingClass.AUDIT_MISMATCH, "sites-a", 0, ((60, 130),), 20)
    assert "Kafka holds 70 offsets the stream has passed, the tables account for 50" in mismatch.detail
