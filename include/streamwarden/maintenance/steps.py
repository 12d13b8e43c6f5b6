"""The steps of one maintenance run, as the ``maintain_tables`` DAG's tasks (and ``streamwarden maintain``) call them.

1. :func:`plan` — per table, the partitions worth compacting (:mod:`.plan`); in a dry run also how many
   files a vacuum would delete.
2. :func:`compact` — first proves what a crashed run left (:func:`.compaction.finish_pending`), then
   compacts and proves each planned partition in turn (:func:`.compaction.compact_partition`).
3. :func:`clean_up` — vacuum, log checkpoint and log clean-up (:mod:`.cleanup`).

Each step holds each table's maintenance lock while it works on the table (:mod:`streamwarden.tables.lock`), and
refuses to change anything while a recovery or an upgrade holds the stream (:mod:`streamwarden.runfiles.hold`).
:func:`run`
runs the three in turn and records the report (what ``streamwarden maintain`` does).
"""

from __future__ import annotations

import logging
from pathlib import Path

from streamwarden.failures import StreamwardenError
from streamwarden.maintenance.cleanup import Cleanup, clean_table
from streamwarden.maintenance.compaction import Compaction, compact_partition, finish_pending, new_run_id
from streamwarden.maintenance.plan import TablePlan, plan_table
from streamwarden.maintenance.report import MaintenanceReport, append_history
from streamwarden.maintenance.request import MaintenanceRequest
from streamwarden.maintenance.settings import MaintenanceSettings, MiB
from streamwarden.runfiles.hold import refuse_if_held
from streamwarden.settings import Settings
from streamwarden.tables.location import TableLocation
from streamwarden.tables.lock import table_lock

log = logging.getLogger("streamwarden.maintenance")


def maintenance_folder(settings: Settings) -> Path:
    """``<run_root>/maintenance``: locks, the journal of the compaction in progress, the history."""
    return settings.run_paths.maintenance


def plan(settings: Settings, request: MaintenanceRequest) -> list[TablePlan]:
    """Step 1: the plan of every requested table that exists (a table the stream has not created is left out)."""
    plans = []
    for name in request.tables:
        location = TableLocation.of(settings, name)
        table = location.open_or_none()
        if table is None:
            log.info("%s: no Delta table yet at %s; nothing to maintain", name, location.uri)
            continue
        plans.append(plan_table(table, name, small_bytes=request.small_file_bytes, min_files=request.min_files,
                                partition_filter=request.partition_filter))
    return plans


def compact(settings: Settings, request: MaintenanceRequest, plans: list[TablePlan], run_id: str) -> list[Compaction]:
    """Step 2, table by table and partition by partition; an ``INTEGRITY`` error stops the run (reverted)."""
    refuse_if_held(settings, "compaction")
    folder = maintenance_folder(settings)
    done: list[Compaction] = []
    for table_plan in plans:
        location = TableLocation.of(settings, table_plan.table)
        with table_lock(folder / "locks", location.name):
            pending = finish_pending(location, folder)
            if pending is not None:
                done.append(pending)
            for number, partition in enumerate(table_plan.to_compact, 1):
                log.info("%s: compacting %s (%d of %d): %d small files, %.1f MiB", location.name, partition.label,
                         number, len(table_plan.to_compact), partition.small_files, partition.small_bytes / MiB)
                result = compact_partition(location, partition, folder=folder, run_id=run_id,
                                           target_size=request.target_file_size,
                                           compression=settings.output_compression)
                log.info("%s %s: version %s, %d files -> %d, %d rows proven in %.1f s", location.name,
                         partition.label, result.version, result.files_removed, result.files_added, result.rows,
                         result.seconds)
                done.append(result)
    return done


def clean_up(settings: Settings, maintenance: MaintenanceSettings, request: MaintenanceRequest) -> list[Cleanup]:
    """Step 3 for every requested table that exists (in a dry run: what vacuum would delete, nothing more)."""
    if not request.dry_run:
        refuse_if_held(settings, "vacuum and log clean-up")
    folder = maintenance_folder(settings)
    done = []
    for name in request.tables:
        location = TableLocation.of(settings, name)
        if not location.exists():
            continue
        with table_lock(folder / "locks", name):
            result = clean_table(location, folder, retention_seconds=maintenance.retention, dry_run=request.dry_run)
        log.info("%s", result.text())
        done.append(result)
    return done


def run(settings: Settings, maintenance: MaintenanceSettings, request: MaintenanceRequest) -> MaintenanceReport:
    """Steps 1-3 in turn (compaction skipped in a dry run); the report is appended to the history.

    A failing step is recorded too (its failure class as the outcome), then its error propagates.
    """
    run_id = new_run_id()
    plans: list[TablePlan] = []
    compactions: list[Compaction] = []
    cleanups: list[Cleanup] = []
    outcome = "dry run" if request.dry_run else "ok"
    try:
        plans = plan(settings, request)
        if not request.dry_run:
            compactions = compact(settings, request, plans, run_id)
        cleanups = clean_up(settings, maintenance, request)
    except StreamwardenError as exc:
        outcome = f"failed ({exc.failure_class.value}): {exc.message}"
        raise
    finally:
        report = MaintenanceReport.build(run_id, dry_run=request.dry_run, outcome=outcome, plans=plans,
                                         compactions=compactions, cleanups=cleanups)
        append_history(maintenance_folder(settings) / "history.jsonl", report)
    return report
