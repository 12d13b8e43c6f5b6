"""The tables now: head, rows and files (``streamwarden tables``), small files (maintenance's plan), the last
compaction (``run/maintenance/history.jsonl``), the last validation and the last validated versions
(``run/validation/``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from streamwarden.atomic import read_json
from streamwarden.dashboard.model import TableNow
from streamwarden.maintenance.plan import plan_table
from streamwarden.maintenance.report import read_history
from streamwarden.maintenance.steps import maintenance_folder
from streamwarden.settings import Settings
from streamwarden.tables.location import TableLocation, pipeline_tables
from streamwarden.tables.reading import TableSummary, summarize
from streamwarden.validation.report import LAST_VALIDATED, last_validated

Summarizer = Callable[[Settings, str], TableSummary]


def latest_validation(settings: Settings) -> dict[str, Any] | None:
    """The newest validation report (``run/validation/<UTC time>.json``), or None before the first run."""
    folder = settings.run_paths.validation
    reports = sorted(p for p in folder.glob("*.json") if p.name != LAST_VALIDATED) if folder.is_dir() else []
    for path in reversed(reports):
        try:
            document: dict[str, Any] | None = read_json(path)
        except ValueError:  # being written by another writer: the one before
            continue
        if document is not None:
            return document
    return None


def last_compaction(history: list[dict[str, Any]], table: str) -> tuple[str | None, dict[str, Any] | None]:
    """When the newest maintenance run that compacted ``table`` finished, and the newest run's totals for it."""
    compacted = next((run["finished_at"] for run in reversed(history) if not run.get("dry_run")
                      and run.get("tables", {}).get(table, {}).get("partitions_compacted", 0) > 0), None)
    newest = next(({"finished_at": run["finished_at"], "outcome": run.get("outcome"), "dry_run": run.get("dry_run"),
                    **run["tables"][table]} for run in reversed(history) if table in run.get("tables", {})), None)
    return compacted, newest


def summaries(settings: Settings, summarizer: Summarizer = summarize) -> dict[str, TableSummary]:
    """``streamwarden tables``' summary of every table of the pipeline."""
    return {name: summarizer(settings, name) for name in pipeline_tables(settings)}


def tables_now(settings: Settings, found_tables: dict[str, TableSummary], *, small_file_bytes: int,
               min_files: int) -> list[TableNow]:
    """Every table summarized, with its small files, maintenance and validation."""
    history = read_history(maintenance_folder(settings) / "history.jsonl")
    validation = latest_validation(settings)
    validated = (last_validated(settings.run_paths.validation) or {}).get("tables", {})
    found = []
    for name, summary in found_tables.items():
        small = None if summary.head is None else _small_files(settings, name, summary.head.version,
                                                                small_bytes=small_file_bytes, min_files=min_files)
        compacted_at, maintenance = last_compaction(history, name)
        checked = validation is not None and name in validation.get("versions", {})
        found.append(TableNow(
            name=name, exists=summary.head is not None, version=summary.head and summary.head.version,
            rows=summary.rows, files=summary.files, bytes=summary.bytes, small_files=small,
            last_commit_at=summary.head and summary.head.committed_at, last_compaction_at=compacted_at,
            last_maintenance=maintenance,
            validation_passed=None if validation is None else bool(validation["passed"]),
            validation_at=None if validation is None else validation.get("finished_at"),
            validation_classes={} if validation is None else dict(validation.get("classes", {})),
            validated_version_in_last_run=validation["versions"][name] if checked and validation else None,
            data_docs=None if validation is None else validation.get("data_docs"),
            last_validated_version=validated.get(name, {}).get("version"),
            last_validated_at=validated.get(name, {}).get("validated_at")))
    return found


def _small_files(settings: Settings, name: str, version: int, *, small_bytes: int, min_files: int) -> int | None:
    """Files below maintenance's small-file size (None for a table maintenance cannot plan: not partitioned)."""
    table = TableLocation.of(settings, name).open(version)
    if not table.metadata().partition_columns:
        return None
    plan = plan_table(table, name, small_bytes=small_bytes, min_files=min_files)
    return sum(p.small_files for p in plan.partitions)


def data_docs_file(settings: Settings, relative: str) -> Path | None:
    """A file of the Data Docs site (``<run_root>/data_docs/...``) by its path inside it; None for anything
    outside the site, missing, or not a path at all (a NUL byte, a name too long)."""
    root = settings.run_paths.data_docs.resolve()
    try:
        target = (root / relative).resolve()
        return target if target.is_relative_to(root) and target.is_file() else None
    except (ValueError, OSError):
        return None
