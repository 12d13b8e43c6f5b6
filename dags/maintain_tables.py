"""
### Maintain tables: compact the stream's small files beside it, prove nothing was lost, clean up

A 3-second trigger (the default) writes a Parquet file per table, partition and batch: thousands a day.
Readers slow down and object-store listings cost more. This DAG compacts them while the stream keeps
running (Delta snapshot isolation: readers see the old files or the new ones, never both, never neither)
and proves, for every commit it makes, that each Kafka topic-partition kept exactly its rows.

#### Steps

1. **plan_compaction** checks the Params, then lists per table and partition the files, the small ones
   (below `small_file_ratio` x the target size) and whether compacting pays (at least `min_files` small
   files). The plan is logged as a table. Nothing changes. A **dry run** stops after this step (the others
   show as skipped; `record_report` records the plan).
2. **compact_and_prove** compacts one partition per Delta commit (delta-rs `optimize.compact`, a
   data-change-free commit; the stream's appends never conflict with it, a conflicting commit is retried
   here). After each commit it proves it: per (topic, partition) the row count, lowest and highest offset
   and an order-independent hash of every row are equal in the files removed and the files added, and
   every file read agrees with its Delta log entry (size, rows, offsets). A failed proof **reverts** the
   commit (a new commit puts the old files back; later stream batches stay) and fails the run with
   `INTEGRITY`. A crash loses at most one partition's work: the next run first proves what the crashed
   one committed (`<run_root>/maintenance/pending/`). While a recovery or an upgrade holds the stream (it
   may roll the tables back) this step and the next are **skipped**, naming the hold; the run's outcome says
   so, and the next run does the work.
3. **vacuum_and_checkpoint** deletes files no version of the retention window references, including
   files of micro-batches that crashed before their commit; then writes a log checkpoint and drops
   expired log files. Refused while a compaction is unproven. After a dry run's skipped compaction it
   only counts what vacuum would delete. Each table the run compacted or cleaned emits one event of the
   asset `streamwarden.<table>` (alias `streamwarden-maintenance`; the compaction's figures and the
   cleanup's as its extra), so `validate_output` (scheduled on these assets) checks the tables once after
   every maintenance run.
4. **record_report** (runs whatever happened) logs files and bytes before/after per table and partition
   and the time taken, pushes it to XCom, appends it to `<run_root>/maintenance/history.jsonl`, and, when a
   step failed, sends an alert (class, evidence, next action) and fails the run.

One run at a time (`max_active_runs=1`), and each table is locked while a step works on it, so a manual
run and `streamwarden maintain` never compact the same files together (that would duplicate rows).

#### Params (manual runs; a scheduled run uses the defaults)

- `tables`: the tables to maintain; empty: every table of the pipeline (`session_rows` and `quarantine`,
  or `records`).
- `partition_filter`: `column=value,...` over the partition columns (e.g. `topic=orders,date=2026-11-23`);
  empty: every partition.
- `target_file_size_mib`: the size compacted files aim at (default `STREAMWARDEN_MAINTENANCE_TARGET_FILE_SIZE`,
  128 MiB). delta-rs rewrites every file of a compacted partition below the target.
- `min_files`: compact a partition only with at least this many small files (default 5).
- `dry_run`: plan only (and show what vacuum would delete).

#### Settings (`STREAMWARDEN_MAINTENANCE_*`, read by the workers)

`SCHEDULE` (`@hourly`; `none` for manual runs only), `TARGET_FILE_SIZE` (bytes), `SMALL_FILE_RATIO` (0.75),
`MIN_FILES` (5), `RETENTION` (7 days; never below `RECOVERY_WINDOW`, 24 h, the furthest recover_stream may
roll back; refused below 1 hour unless `FORCE_SHORT_RETENTION=true`, which is for drills with the stream
stopped: a retention of 0 deletes files the stream has written but not committed yet).

#### When it fails

- **INTEGRITY** (the proof failed, or files differ from the log): nothing was lost, the commit was reverted
  or never made. The alert names the files. Find out who changed them; keep maintenance off that partition
  (`partition_filter`) or pause this DAG; trigger `validate_output`.
- **CONFIG**: a Param or setting is wrong; the message names it. Nothing changed. Fix and trigger again.
- **ENVIRONMENT**: another run holds the table, or storage failed. Trigger again later; anything left
  unproven is proven first.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG, Param

from streamwarden.maintenance.settings import MiB, load_maintenance_settings
from streamwarden.settings import load_settings
from streamwarden.tables.location import TABLES
from streamwarden_airflow.operators.maintenance import (
    CleanUpTablesOperator,
    CompactPartitionsOperator,
    MaintenanceReportOperator,
    PlanCompactionOperator,
)
from streamwarden_airflow.timetables import start_date

maintenance = load_maintenance_settings()
PARTITION_FILTER = r"^\s*([A-Za-z_]\w*=[^,=]+(\s*,\s*[A-Za-z_]\w*=[^,=]+)*)?\s*$"

with DAG(
    dag_id="maintain_tables",
    description="Compact the stream's small files beside the live stream, prove every row kept, vacuum.",
    doc_md=__doc__,
    schedule=None if maintenance.schedule.lower() == "none" else maintenance.schedule,
    start_date=start_date(load_settings()),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(hours=6),
    default_args={"owner": "streamwarden", "retries": 0},
    tags=["streamwarden", "tables", "maintenance"],
    params={
        "tables": Param([], type="array", items={"type": "string", "enum": list(TABLES)}, examples=list(TABLES),
                        description="Tables to maintain; empty: every table of the pipeline."),
        "partition_filter": Param(None, type=["null", "string"], pattern=PARTITION_FILTER,
                                  description="column=value,... over the partition columns; empty: all partitions."),
        "target_file_size_mib": Param(maintenance.target_file_size // MiB, type="integer", minimum=1,
                                      description="Size a compacted file aims at, in MiB."),
        "min_files": Param(maintenance.min_files, type="integer", minimum=2,
                           description="Compact a partition only with at least this many small files."),
        "dry_run": Param(False, type="boolean", description="Plan only; show what vacuum would delete."),
    },
) as dag:
    plan_compaction = PlanCompactionOperator(task_id="plan_compaction")
    compact_and_prove = CompactPartitionsOperator(task_id="compact_and_prove", plan_task_id="plan_compaction")
    vacuum_and_checkpoint = CleanUpTablesOperator(task_id="vacuum_and_checkpoint", plan_task_id="plan_compaction",
                                                  compact_task_id="compact_and_prove")
    record_report = MaintenanceReportOperator(task_id="record_report", plan_task_id="plan_compaction",
                                              compact_task_id="compact_and_prove",
                                              clean_up_task_id="vacuum_and_checkpoint")

    plan_compaction >> compact_and_prove >> vacuum_and_checkpoint >> record_report
