"""The record of one maintenance run: files and bytes before and after per table and partition, and time.

Shown as a table in the task log, pushed to XCom, appended to ``<run_root>/maintenance/history.jsonl``
(one JSON document per run, file mode 0600), and given per table as the extra of its asset event.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from streamwarden.maintenance.cleanup import Cleanup
from streamwarden.maintenance.compaction import Compaction
from streamwarden.maintenance.plan import TablePlan
from streamwarden.maintenance.settings import MiB


@dataclass(frozen=True)
class PartitionRow:
    """One line of the report: a partition before and after (after = before when not compacted)."""

    table: str
    partition: str
    files_before: int
    files_after: int
    bytes_before: int
    bytes_after: int
    rows: int
    version: int | None
    action: str
    seconds: float


@dataclass(frozen=True)
class MaintenanceReport:
    """What a run planned and did, and how it ended (``ok``, ``dry run``, or the failure)."""

    run_id: str
    dry_run: bool
    outcome: str
    rows: tuple[PartitionRow, ...]
    cleanups: tuple[Cleanup, ...]
    finished_at: str

    @classmethod
    def build(cls, run_id: str, *, dry_run: bool, outcome: str, plans: Sequence[TablePlan],
              compactions: Sequence[Compaction], cleanups: Sequence[Cleanup]) -> MaintenanceReport:
        rows = [PartitionRow(c.table, c.partition, c.files_removed, c.files_added, c.bytes_removed, c.bytes_added,
                             c.rows, c.version, "earlier run's compaction, proven" if c.version is not None
                             else "earlier run committed nothing", c.seconds)
                for c in compactions if c.earlier_run]
        done = {(c.table, c.partition): c for c in compactions if not c.earlier_run}
        for plan in plans:
            for p in plan.partitions:
                c = done.get((plan.table, p.label))
                if c is None:
                    action = ("would compact" if dry_run else "not compacted") if p.pays else p.reason
                    rows.append(PartitionRow(plan.table, p.label, p.files, p.files, p.bytes, p.bytes, 0, None,
                                             action, 0.0))
                else:
                    # The stream keeps committing: the compaction may take files added after the plan too.
                    files = max(p.files, c.files_removed)
                    action = "compacted, proven" if c.version is not None else "nothing to compact"
                    if files > p.files:
                        action += f" (with {files - p.files:,} file(s) the stream added after the plan)"
                    rows.append(PartitionRow(plan.table, p.label, files, files - c.files_removed + c.files_added,
                                             max(p.bytes, c.bytes_removed), max(p.bytes, c.bytes_removed)
                                             - c.bytes_removed + c.bytes_added, c.rows, c.version, action, c.seconds))
        return cls(run_id, dry_run, outcome, tuple(rows), tuple(cleanups), datetime.now(UTC).isoformat())

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "dry_run": self.dry_run, "outcome": self.outcome,
                "finished_at": self.finished_at, "partitions": [vars(r) for r in self.rows],
                "cleanups": [c.to_json() for c in self.cleanups], "tables": self.table_totals()}

    def table_totals(self) -> dict[str, dict[str, Any]]:
        """Per table: files and bytes before and after, partitions compacted, rows proven (asset event extra)."""
        totals: dict[str, dict[str, Any]] = {}
        for r in self.rows:
            t = totals.setdefault(r.table, {"files_before": 0, "files_after": 0, "bytes_before": 0, "bytes_after": 0,
                                            "partitions_compacted": 0, "rows_proven": 0, "versions": []})
            for name in ("files_before", "files_after", "bytes_before", "bytes_after"):
                t[name] += getattr(r, name)
            if r.version is not None:
                t["partitions_compacted"] += 1
                t["rows_proven"] += r.rows
                t["versions"].append(r.version)
        return totals

    def text(self) -> str:
        """The report as a fixed-width table for a person."""
        header = ("table", "partition", "files before", "after", "MiB before", "after", "rows proven", "version",
                  "seconds", "action")
        lines = [(r.table, r.partition, f"{r.files_before:,}", f"{r.files_after:,}", f"{r.bytes_before / MiB:,.1f}",
                  f"{r.bytes_after / MiB:,.1f}", f"{r.rows:,}", "-" if r.version is None else str(r.version),
                  f"{r.seconds:.1f}", r.action) for r in self.rows]
        widths = [max(len(row[i]) for row in [header, *lines]) for i in range(len(header))]
        text = ["  ".join(cell.ljust(widths[i]) if i in (0, 1, 9) else cell.rjust(widths[i])
                          for i, cell in enumerate(row)).rstrip() for row in [header, *lines]]
        if not self.rows:  # no plan at all when planning failed or never ran: the outcome below says which
            text.append("(no table to maintain yet)" if self.outcome in ("planned", "ok", "dry run")
                        else "(nothing planned)")
        text.extend(c.text() for c in self.cleanups)
        text.append(f"run {self.run_id}: {self.outcome}")
        return "\n".join(text)


def append_history(path: Path, report: MaintenanceReport) -> None:
    """Append the report as one line of ``path`` (created 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(handle, (json.dumps(report.to_json(), sort_keys=True) + "\n").encode())
    finally:
        os.close(handle)


def read_history(path: Path) -> list[dict[str, Any]]:
    """Every run recorded in ``path`` (oldest first; [] when none)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
