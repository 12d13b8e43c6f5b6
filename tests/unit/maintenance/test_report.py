"""The maintenance report's rows: files and bytes before and after a partition's compaction, as they were."""

from __future__ import annotations

from streamwarden.maintenance.compaction import Compaction
from streamwarden.maintenance.plan import PartitionPlan, TablePlan
from streamwarden.maintenance.report import MaintenanceReport

VALUES = (("source_topic", "sites-0"), ("date", "2026-11-27"))


def _report(removed: int, removed_bytes: int) -> MaintenanceReport:
    plan = TablePlan("session_rows", 10, (PartitionPlan(VALUES, 12, 1200, 12, 1200, True, "12 small files"),))
    done = Compaction("session_rows", plan.partitions[0].label, 11, removed, 1, removed_bytes, 900, 5000, 1.5)
    return MaintenanceReport.build("r", dry_run=False, outcome="ok", plans=[plan], compactions=[done], cleanups=[])


def test_a_compaction_of_the_planned_files_reports_them_before_and_one_after() -> None:
    (row,) = _report(12, 1200).rows
    assert (row.files_before, row.files_after, row.bytes_before, row.bytes_after) == (12, 1, 1200, 900)
    assert row.action == "compacted, proven"


def test_files_the_stream_added_after_the_plan_are_counted_before_never_a_negative_after() -> None:
    (row,) = _report(15, 1500).rows
    assert (row.files_before, row.files_after, row.bytes_before, row.bytes_after) == (15, 1, 1500, 900)
    assert row.action == "compacted, proven (with 3 file(s) the stream added after the plan)"
