"""The record of one validation run: the versions read, figures per topic-partition, findings, and the verdict.

Shown as a table in the task log, pushed to XCom (:meth:`ValidationReport.summary`), written in full to
``<run_root>/validation/<UTC time>.json`` (file mode 0600). A run that checked the rows with Great
Expectations names its Data Docs (``<run_root>/data_docs/index.html`` and this run's pages). When every
check passed, the versions read are recorded as the last validated versions
(``<run_root>/validation/last_validated.json``): the version of each table that ``recover_stream`` may roll
back to.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from streamwarden.atomic import read_json, write_json_atomic
from streamwarden.durations import duration_text
from streamwarden.session_restarts.sessions import SiteSessions
from streamwarden.validation.agreement import CheckpointPosition
from streamwarden.validation.audit import HourCount
from streamwarden.validation.content import ContentCoverage
from streamwarden.validation.coverage import PartitionCoverage
from streamwarden.validation.findings import Finding
from streamwarden.validation.request import Check
from streamwarden.validation.upstream import PartitionUpstream

LAST_VALIDATED = "last_validated.json"


@dataclass(frozen=True)
class ValidationReport:
    """What one run read and found; ``passed`` when it found nothing."""

    run_id: str
    started_at: str
    finished_at: str
    checks: tuple[str, ...]  # the checks made (values of streamwarden.validation.request.Check)
    versions: dict[str, int]  # table -> the version every check read
    checkpoint: CheckpointPosition | None
    partitions: tuple[PartitionCoverage, ...]
    upstream: tuple[PartitionUpstream, ...]
    hours: tuple[HourCount, ...]  # the per-hour audit
    findings: tuple[Finding, ...]
    notes: tuple[str, ...]  # checks skipped, and why
    data_docs: str | None = None  # the Data Docs site's index.html, when the rows were checked
    data_docs_pages: dict[str, str] = field(default_factory=dict)  # batch validated -> its page of this run
    sites: tuple[SiteSessions, ...] = ()  # check 5: every site's sessions
    exposure_limit: float | None = None  # check 5's limit (seconds); None: no restart schedule
    content: tuple[ContentCoverage, ...] = ()  # check 6: what each table's content check hashed
    rows_checked: dict[str, str] = field(default_factory=dict)  # table -> what the data expectations read of it
    coverage_read: str = ""  # what check 1 read: a window after the last validation, or every row and why

    @property
    def passed(self) -> bool:
        return not self.findings

    @property
    def validates_versions(self) -> bool:
        """The run passed and read the tables' content through (check 1 and the data expectations, the checks
        that read the rows): its versions may become the last validated ones."""
        return self.passed and {Check.COVERAGE.value, Check.EXPECTATIONS.value} <= set(self.checks)

    def classes(self) -> dict[str, int]:
        """Findings per class."""
        return dict(sorted(Counter(f.finding_class.value for f in self.findings).items()))

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "started_at": self.started_at, "finished_at": self.finished_at,
                "passed": self.passed, "checks": list(self.checks), "versions": self.versions,
                "classes": self.classes(), "checkpoint": None if self.checkpoint is None else self.checkpoint.to_json(),
                "partitions": [p.to_json() for p in self.partitions],
                "upstream": [asdict(u) for u in self.upstream], "audit": [asdict(h) for h in self.hours],
                "findings": [f.to_json() for f in self.findings], "notes": list(self.notes),
                "data_docs": self.data_docs, "data_docs_pages": dict(self.data_docs_pages),
                "exposure": self.exposure_json(), "content": [asdict(c) for c in self.content],
                "rows_checked": dict(self.rows_checked), "coverage_read": self.coverage_read}

    def exposure_json(self) -> dict[str, Any]:
        """Check 5's figures: the limit and every site's sessions and exposure at the end of the run."""
        now = datetime.fromisoformat(self.finished_at)
        return {"limit_s": self.exposure_limit, "sites": [s.to_json(now) for s in self.sites]}

    def summary(self, report_path: Path | None = None, max_findings: int = 50) -> dict[str, Any]:
        """A small JSON form for XCom and alerts: verdict, versions, classes, the first findings (the file
        holds the rest), and the Data Docs."""
        return {"run_id": self.run_id, "finished_at": self.finished_at, "passed": self.passed,
                "checks": list(self.checks), "versions": self.versions, "classes": self.classes(),
                "findings_total": len(self.findings),
                "findings": [f.to_json() for f in self.findings[:max_findings]], "notes": list(self.notes),
                "report": None if report_path is None else str(report_path), "data_docs": self.data_docs,
                "data_docs_pages": dict(self.data_docs_pages), "exposure": self.exposure_json(),
                "content": [c.line() for c in self.content], "rows_checked": list(self.rows_checked.values()),
                "coverage_read": self.coverage_read}

    def text(self) -> str:
        """The report as a fixed-width table for a person, then the findings and the next actions."""
        upstream = {(u.topic, u.partition): u for u in self.upstream}
        tables = list(dict.fromkeys(name for p in self.partitions for name in p.offsets))
        header = ("topic", "partition", "claimed", *(f"{n} offsets" for n in tables), "gaps", "duplicates",
                  "log start", "log end", "lag", "expired")
        lines = []
        for p in self.partitions:
            u = upstream.get((p.topic, p.partition))
            kafka = ("-",) * 4 if u is None else (f"{u.log_start:,}", f"{u.log_end:,}", f"{u.lag:,}", f"{u.expired:,}")
            claimed = ", ".join(f"[{s}, {e})" for s, e in p.claimed) or "-"
            lines.append((p.topic, str(p.partition), claimed, *(f"{p.offsets.get(n, 0):,}" for n in tables),
                          f"{p.gaps:,}", f"{p.duplicates:,}", *kafka))
        widths = [max(len(row[i]) for row in [header, *lines]) for i in range(len(header))]
        text = ["  ".join(cell.ljust(widths[i]) if i in (0, 2) else cell.rjust(widths[i])
                          for i, cell in enumerate(row)).rstrip() for row in [header, *lines]]
        if not lines:
            text.append("(no topic-partition in the tables yet)")
        if self.sites:
            now = datetime.fromisoformat(self.finished_at)
            limit = "no limit: no restart schedule" if self.exposure_limit is None else \
                f"limit {duration_text(self.exposure_limit)}"
            text.append(f"exposure (time since each site's last clean session start; {limit}):")
            text.extend(f"  {s.site}: {duration_text(s.exposure(now))} since "
                        f"{s.last_clean_start.isoformat() if s.last_clean_start else '-'}; {s.open_sessions} open, "
                        f"{s.damaged_sessions} damaged" for s in self.sites)
        if self.hours:
            mismatched = sum(h.kafka != h.tables for h in self.hours)
            text.append(f"audit: {len(self.hours):,} topic-partition hours compared with Kafka, {mismatched:,} differ")
        text.extend(f"content: {c.line()}" for c in self.content)
        text.extend(f"check 1 read: {self.coverage_read}" for _ in (1,) if self.coverage_read)
        text.extend(f"expectations: {line}" for line in self.rows_checked.values())
        text.extend(f"  {f.line()}" for f in self.findings)
        for finding in {f.finding_class: f for f in self.findings}.values():
            text.append(f"next action ({finding.finding_class.value}): {finding.next_action}")
        text.extend(f"note: {n}" for n in self.notes)
        if self.data_docs:
            text.append(f"Data Docs: {self.data_docs}")
            text.extend(f"  {name}: {page}" for name, page in sorted(self.data_docs_pages.items()))
        versions = ", ".join(f"{name} v{version}" for name, version in sorted(self.versions.items())) or "no table"
        verdict = "passed" if self.passed else "FAILED " + ", ".join(f"{c} {n}" for c, n in self.classes().items())
        text.append(f"validation {self.run_id}: {verdict} ({versions})")
        return "\n".join(text)


def write_report(folder: Path, report: ValidationReport) -> Path:
    """Write the report as ``<folder>/<UTC time>.json`` (0600; the folder 0700); its path."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    stamp = datetime.fromisoformat(report.finished_at).astimezone(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    path = folder / f"{stamp}.json"
    write_json_atomic(path, report.to_json())  # a temp file made 0600, renamed into place
    os.chmod(path, 0o600)
    return path


def record_last_validated(folder: Path, report: ValidationReport, report_path: Path) -> dict[str, Any] | None:
    """When ``report`` passed and read the rows through (:attr:`ValidationReport.validates_versions`): the
    versions of the tables whose rows it checked become the last validated ones, unless a newer version of a
    table passed before (other tables keep theirs).
    The document written, or None when the report failed (nothing is changed)."""
    if not report.validates_versions:
        return None
    document: dict[str, Any] = last_validated(folder) or {"tables": {}}
    for name, version in report.versions.items():
        if name not in report.rows_checked:
            continue  # its rows since the last validated version were not read
        if document["tables"].get(name, {}).get("version", -1) > version:
            continue  # an older version validated again: the newest passing one stays
        document["tables"][name] = {"version": version, "validated_at": report.finished_at, "run_id": report.run_id,
                                    "report": report_path.name}
    write_json_atomic(folder / LAST_VALIDATED, document)
    os.chmod(folder / LAST_VALIDATED, 0o600)
    return document


def last_validated(folder: Path) -> dict[str, Any] | None:
    """``{"tables": {name: {"version", "validated_at", "run_id", "report"}}}``, or None before any passing run."""
    document: dict[str, Any] | None = read_json(folder / LAST_VALIDATED)
    return document

