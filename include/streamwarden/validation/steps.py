"""One validation run, as the ``validate_output`` DAG calls it: pin, check, report, record.

1. The checkpoint's committed position is read, then every table of the pipeline is pinned at its newest
   version (:mod:`.snapshot`), then the checkpoint's planned position (:mod:`.agreement` explains the order).
2. Every data file the pinned versions list is looked for in storage at its recorded size (a STORAGE finding
   each, the file left out of the reads: :mod:`streamwarden.tables.storage`), and check 6 hashes the files
   found whole, all or a share per run (:mod:`.content`), against the digests recorded at their commits (an
   INTEGRITY finding each, the file left out too); check 1, offsets covered without
   gap or duplicate (:mod:`.coverage`); check 2, the checkpoint against the
   tables (:mod:`.agreement`); check 3, Kafka (:mod:`.upstream`) and check 4, the per-hour audit
   (:mod:`.audit`), unless turned off or the broker is down (a note then, not a finding); check 5, each
   site's exposure against the session restart schedule (:mod:`.exposure`); then the data
   checks with Great Expectations on the same versions (:mod:`.expectations`), with their Data Docs. GX is
   imported in the background while checks 1-4 run, and only by a run that makes the data checks.
3. The report (:mod:`.report`) is written; a passing run records its versions as the last validated ones.

A run makes the checks its :class:`~.request.ValidationRequest` asks for (a scheduled run: all). Tables pinned
at given versions or a given time (an older version, to check it before a recovery) are checked by check 1
only: the checkpoint and Kafka describe the present, not those versions.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from streamwarden.session_restarts.settings import RestartSettings, load_restart_settings
from streamwarden.settings import Settings
from streamwarden.tables.committed import TopicPartition
from streamwarden.tables.location import pipeline_tables
from streamwarden.tables.sql import bounded_connection
from streamwarden.validation.agreement import CheckpointPosition, check_checkpoint, read_committed, with_planned
from streamwarden.validation.audit import Audit, HourCount, ask_kafka, audit
from streamwarden.validation.content import ContentShare
from streamwarden.validation.coverage import PartitionCoverage, check_coverage
from streamwarden.validation.exposure import Exposure, check_exposure
from streamwarden.validation.findings import Finding, storage_finding
from streamwarden.validation.report import (
    ValidationReport,
    last_validated,
    record_last_validated,
    write_report,
)
from streamwarden.validation.request import Check, Rows, ValidationRequest, default_request, skipped_because
from streamwarden.validation.settings import ValidationSettings
from streamwarden.validation.snapshot import PinnedTable, pin
from streamwarden.validation.upstream import PartitionUpstream, annotate, check_upstream
from streamwarden.validation.window import Window, choose_window

if TYPE_CHECKING:
    from streamwarden.validation.expectations.run import ExpectationsOutcome

log = logging.getLogger("streamwarden.validation")
EXPECTATIONS_MODULE = "streamwarden.validation.expectations.run"


@dataclass(frozen=True)
class Recorded:
    """Where a run's report went, and the last validated versions it recorded (None when it failed)."""

    report: ValidationReport
    path: Path
    last_validated: dict[str, object] | None


def validate(settings: Settings, validation: ValidationSettings, request: ValidationRequest | None = None,
             restarts: RestartSettings | None = None) -> ValidationReport:
    """Steps 1 and 2: the requested checks (by default every one) on one pinned version of each table
    (``restarts``: the restart schedule check 5 judges exposure against; by default from the environment)."""
    request = request or default_request(settings, validation)
    started = datetime.now(UTC).isoformat()
    run_id = uuid.uuid4().hex[:16]
    notes: list[str] = []
    importing = _import_in_background() if request.wants(Check.EXPECTATIONS) else None
    committed = read_committed(settings.checkpoint_location)
    tables = pin(settings, pipeline_tables(settings), request.versions, request.as_of)  # they account together
    position = with_planned(committed)
    absent = sorted(set(pipeline_tables(settings)) - {t.name for t in tables})
    if absent:
        notes.append(f"no Delta table yet: {', '.join(absent)} (the stream creates its tables at start)")
    if request.pinned:
        notes.append("tables pinned at given versions or a given time: the checkpoint and Kafka describe the "
                     "present, checks 2-4 skipped")
    notes += [f"check {c.value} skipped: {skipped_because(c, validation)}" for c in Check if c not in request.checks]
    upstream: tuple[PartitionUpstream, ...] = ()
    hours: tuple[HourCount, ...] = ()
    folder = settings.run_paths.validation
    shares = {t.name: ContentShare.of(folder, t.name, validation.content_mib) for t in tables}
    storage = {t.name: t.check_storage(shares[t.name].choose if request.wants(Check.CONTENT) else None)
               for t in tables}
    findings = [storage_finding(problem) for checked in storage.values() for problem in checked.problems]
    content = tuple(covered for name, checked in storage.items() if (covered := shares[name].coverage(name, checked)))
    window, coverage_read = _window(tables, request, folder)
    with bounded_connection(settings.run_paths.spill) as con:
        coverage = check_coverage(tables, row_key=validation.row_key_columns, max_ranges=validation.max_ranges,
                                  more_partitions=() if request.pinned else position.committed, connection=con,
                                  window=window)
        if request.wants(Check.COVERAGE):
            findings += coverage.findings
        if request.wants(Check.CHECKPOINT):
            if position.exists:
                findings += check_checkpoint(position, tables, absent)
            else:
                notes.append(f"no committed batch in the checkpoint at {position.path}: check 2 skipped")
        if request.wants(Check.KAFKA):
            upstream, hours, found, said = _against_kafka(settings, validation, con, tables, position, window=window,
                                                          audit_hours=request.wants(Check.AUDIT))
            findings, notes = annotate(findings + found, upstream), notes + said
        exposure = Exposure()
        if request.wants(Check.EXPOSURE) and settings.pipeline == "sessions":
            exposure = check_exposure(con, tables, restarts or load_restart_settings(), now=datetime.now(UTC),
                                      session_timeout=settings.session_timeout)
            findings += exposure.findings
            notes += [exposure.note] if exposure.note else []
    docs: Path | None = None
    pages: dict[str, str] = {}
    rows: dict[str, str] = {}
    if importing is not None:
        outcome = _expectations(settings, validation, request, tables, coverage.partitions, run_id=run_id,
                                importing=importing)
        findings, notes = findings + list(outcome.findings), notes + list(outcome.notes)
        docs, pages = outcome.data_docs, {name: str(page) for name, page in outcome.pages.items()}
        rows = outcome.rows
    made = tuple(c.value for c in Check if request.wants(c))
    return ValidationReport(run_id, started, datetime.now(UTC).isoformat(), made, {t.name: t.version for t in tables},
                            None if request.pinned else position, coverage.partitions, upstream, hours,
                            tuple(findings), tuple(notes), None if docs is None else str(docs), pages,
                            exposure.sites, exposure.limit, content, rows, coverage_read)


def _window(tables: list[PinnedTable], request: ValidationRequest, folder: Path) -> tuple[Window | None, str]:
    """What check 1 reads (:mod:`.window`): the window after the last validation, or every row; and the
    report's line on it."""
    if request.pinned:
        return None, "every row of the pinned versions"
    if request.rows is Rows.ALL:
        return None, "every row (`rows=all`)"
    chosen = choose_window(tables, last_validated(folder), folder) if tables else "every row: no table yet"
    return (chosen, chosen.line()) if isinstance(chosen, Window) else (None, chosen)


def _import_in_background() -> threading.Thread:
    """Import Great Expectations (5 s of Python) while checks 1-4 wait on DuckDB and the broker."""
    def load() -> None:
        with contextlib.suppress(Exception):  # imported again where it is used, and raised there
            importlib.import_module(EXPECTATIONS_MODULE)
    thread = threading.Thread(target=load, name="streamwarden-gx-import", daemon=True)
    thread.start()
    return thread


def _expectations(settings: Settings, validation: ValidationSettings, request: ValidationRequest,
                  tables: list[PinnedTable], partitions: Sequence[PartitionCoverage], *, run_id: str,
                  importing: threading.Thread) -> ExpectationsOutcome:
    """The data checks on the pinned tables: rows of the requested tables (by default those committed since
    their last validated versions), per topic-partition figures of all. Freshness is judged at the pinned
    versions' commit for pinned tables, else now."""
    importing.join()
    run = importlib.import_module(EXPECTATIONS_MODULE)
    commits = [t.committed_at for t in tables if t.committed_at is not None]
    reference = datetime.fromtimestamp(max(commits), UTC) if request.pinned and commits else None
    outcome: ExpectationsOutcome = run.check_expectations(
        settings, validation, tables, checked=request.tables, partitions=partitions, run_id=run_id,
        since=_since(settings, request), reference=reference)
    log.info("data checks: %d expectations in %.1f s; Data Docs %s", outcome.evaluated, outcome.seconds,
             outcome.data_docs or "not built")
    return outcome


def _since(settings: Settings, request: ValidationRequest) -> dict[str, int]:
    """The version after which each table's rows are checked: its last validated one, unless the run is pinned
    or asks for every row."""
    if request.pinned or request.rows is Rows.ALL:
        return {}
    tables = (last_validated(settings.run_paths.validation) or {}).get("tables", {})
    return {name: int(entry["version"]) for name, entry in tables.items() if isinstance(entry.get("version"), int)}


def _against_kafka(settings: Settings, validation: ValidationSettings, con: duckdb.DuckDBPyConnection,
                   tables: list[PinnedTable], position: CheckpointPosition, *, window: Window | None,
                   audit_hours: bool
                   ) -> tuple[tuple[PartitionUpstream, ...], tuple[HourCount, ...], list[Finding], list[str]]:
    """Checks 3 and 4 (check 4 over check 1's window): their figures, findings, and notes on what was
    skipped."""
    result = check_upstream(settings, tables, position.committed if position.exists else None,
                            timeout=validation.broker_timeout, stale_after=validation.stale_after)
    if result.error is not None:
        return (), (), [], [f"the broker could not be asked, checks 3 and 4 skipped: {result.error}"]
    if not audit_hours:
        return result.rows, (), list(result.findings), []
    audited = _audit(settings, validation, con, tables, result.rows, window=window)
    notes = [] if audited.error is None else [
        f"Kafka could not be asked for offsets by time, check 4 skipped: {audited.error}"]
    return result.rows, audited.rows, [*result.findings, *audited.findings], notes


def _audit(settings: Settings, validation: ValidationSettings, con: duckdb.DuckDBPyConnection,
           tables: list[PinnedTable], upstream: tuple[PartitionUpstream, ...], *, window: Window | None) -> Audit:
    """Check 4 for the partitions check 3 saw, from the latest of the log start, the tables' first claim and
    the floor of check 1's window (below it, the tables' offsets were not read)."""
    firsts: dict[TopicPartition, int] = {}
    for table in tables:
        for tp, intervals in table.known_claims().items():
            if intervals:
                firsts[tp] = min(firsts.get(tp, intervals[0][0]), intervals[0][0])
    floor = window.floor if window is not None else (lambda topic: 0)
    windows = {(u.topic, u.partition): (max(u.log_start, firsts[(u.topic, u.partition)], floor(u.topic)), u.position)
               for u in upstream if (u.topic, u.partition) in firsts}
    if not windows:
        return Audit()
    boundaries = ask_kafka(settings, {(u.topic, u.partition): u.log_end for u in upstream if (u.topic, u.partition)
                                      in windows}, validation.audit_hours, validation.broker_timeout, time.time())
    return Audit(error=boundaries) if isinstance(boundaries, str) else audit(con, boundaries, windows)


def record(settings: Settings, report: ValidationReport) -> Recorded:
    """Step 3: the report file, and the last validated versions when the run passed."""
    folder = settings.run_paths.validation
    path = write_report(folder, report)
    return Recorded(report, path, record_last_validated(folder, report, path))


def run(settings: Settings, validation: ValidationSettings, request: ValidationRequest | None = None,
        restarts: RestartSettings | None = None) -> Recorded:
    """Steps 1-3, with the report in the log."""
    started = time.perf_counter()
    report = validate(settings, validation, request, restarts)
    recorded = record(settings, report)
    log.info("%s\nreport %s (%.1f s)", report.text(), recorded.path, time.perf_counter() - started)
    return recorded
