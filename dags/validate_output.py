"""
### Validate output: the tables against Kafka's offsets and the checkpoint, and the rows against expectations

A checkpoint and an output that disagree, a gap nobody saw, a producer filling a table with nonsense: each
is silent until a user of the data finds it. This DAG finds it first, with the evidence and the next
step. Kafka lag tools cannot see this stream (Spark keeps its offsets in its checkpoint), so it checks
itself. It runs every 30 minutes (`STREAMWARDEN_VALIDATION_SCHEDULE`) and after each `maintain_tables`
run (it is scheduled on the tables' assets `streamwarden.<table>`).

#### Steps

1. **check_params** checks the Params and the `STREAMWARDEN_VALIDATION_*` settings; a bad one fails here,
   naming it. Nothing is read yet.
2. **validate_tables** pins every table at one Delta version (read between the checkpoint's committed and
   planned positions, so all checks see one consistent state), looks for every data file they list in
   storage at its recorded size (`STORAGE`), and makes the checks:
   - `coverage`: per topic-partition, `session_rows` and `quarantine` together cover every offset their
     logs claim, from the first still accounted for to the newest committed: no gap (`GAP`), no offset
     twice (`DUPLICATE`); pushed down to DuckDB over the pinned files;
   - `checkpoint`: the checkpoint's committed offsets agree with the tables' newest, allowing the one
     batch in flight (`CHECKPOINT_MISMATCH`);
   - `kafka`: log start and end per partition: offsets deleted before they were read (`DATA_EXPIRED`),
     lag, and time left before unread data expires at the stream's rate (`STALE`);
   - `audit`: messages per topic-partition per hour in Kafka against the rows the tables account for, for
     the hours Kafka still holds (`AUDIT_MISMATCH`);
   - `exposure`: per site, the time since its last clean session start (the clean start of its oldest open
     session); over 1.5 x the `restart_sessions` interval it is `EXPOSURE` (a warning);
   - `expectations`: Great Expectations checks of the rows committed since each table's last validated
     version, in batches of at most `BATCH_ROWS` (`EXPECTATION_FAILED`; freshness `STALE`), Data Docs under
     `<run_root>/data_docs/`;
   - `content`: each data file's SHA-256 against the one recorded when it was committed: a changed byte is
     `INTEGRITY` (every file every run, or `CONTENT_MIB` per run in turn).
   It logs the report as a table, writes it to `<run_root>/validation/<time>.json` and pushes a summary to
   XCom. When every check passed, the versions read become the **last validated versions**
   (`<run_root>/validation/last_validated.json`, what `recover_stream` rolls back to). It fails when it
   found something.
3. **report_and_alert** (runs whatever happened) alerts through the warden's channels (log, webhook,
   e-mail) with the classes, the evidence (table, topic, partition, offsets, counts), the report and Data
   Docs, and the DAG to trigger next with its Params; then fails the run. The same unchanged findings
   alert once, not every run.

#### Params (manual runs; a scheduled run checks everything on the newest versions)

- `tables`: the tables whose rows the data expectations check; empty: every table of the pipeline. Offsets
  are always reconciled over all of them (`session_rows` and `quarantine` account for them together).
- `checks`: which checks (above); empty: all (those turned off by the settings stay off).
- `versions`: `{"session_rows": 41, "quarantine": 40}` (one per table): check these versions instead of the
  newest (e.g. before a recovery).
- `as_of`: an ISO 8601 time: check each table as it was then (its newest version committed by then).
  With `versions` or `as_of` only `coverage`, `expectations` and `content` run: the checkpoint and Kafka
  describe the present.
- `rows`: which rows the data expectations check: `new` (those committed since each table's last
  validated version; every row before any run passed, and on pinned versions) or `all` (after changing
  your own expectations, say).

#### Settings (`STREAMWARDEN_VALIDATION_*`, read by the workers)

`SCHEDULE` (`30m`; a cron expression, `@hourly`, or `none`: after maintenance and manual runs only),
`KAFKA` (true: checks 3 and 4), `AUDIT_HOURS` (24), `STALE_AFTER` (15 minutes), `BROKER_TIMEOUT` (10 s),
`ROW_KEY` (`row_id`), `MAX_RANGES` (10 offset ranges of evidence per finding), `CONTENT_MIB` (0: every
file's content every run); the data checks' settings and
the user expectations file (`STREAMWARDEN_VALIDATION_EXPECTATIONS`) are in `docs/validation.md`.

#### When it fails

- **INTEGRITY** / **STORAGE**: a data file's bytes changed, or the file is gone or cut short: the finding
  names it, what it held and when it was written. Do not run `maintain_tables` on the table; put the file back
  from a backup, or trigger `recover_stream` with the alert's Params (`as_of` one second before the file was
  written, `dry_run` first).
- **GAP** / **DUPLICATE**: rows are missing or held twice. Stop anything else writing the table; trigger
  `recover_stream` with `{"target": "last_validated", "dry_run": true}` to see the blast radius, then for
  real; then this DAG again.
- **CHECKPOINT_MISMATCH**: the stream will skip or has skipped offsets; `recover_stream` as above.
- **DATA_EXPIRED**: Kafka deleted offsets before they were read: lost from this pipeline; the alert names
  them. Raise `retention.ms`; `recover_stream` dry run shows what can still be replayed.
- **AUDIT_MISMATCH**: compare the hour's offsets named; run this DAG with `checks` `["coverage", "audit"]`.
- **EXPECTATION_FAILED**: rows break an expectation; the Data Docs name them (topic, partition, offset). Fix
  the producer or the handler (`upgrade_stream`).
- **STALE**: the stream falls behind or stopped: see `stream_supervisor`.
- **EXPOSURE**: sites without a clean session start for too long: trigger `restart_sessions` with
  `{"sites": [<sites named>]}`; if restarts are not scheduled, set `STREAMWARDEN_SESSION_RESTART_SCHEDULE`.
- **CONFIG** (a Param or setting) or **ENVIRONMENT** (storage, broker): nothing was validated and the last
  validated versions stay; fix what the message names and trigger again.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG, AssetAny, AssetOrTimeSchedule, Param

from streamwarden.tables.location import pipeline_tables
from streamwarden.validation.request import Check
from streamwarden_airflow.hooks.tables import DeltaTablesHook
from streamwarden_airflow.operators.validation import (
    CheckValidationParamsOperator,
    ValidateTablesOperator,
    ValidationReportOperator,
)
from streamwarden_airflow.timetables import start_date, timetable_for

hook = DeltaTablesHook()  # settings only: no table, DataFrame or broker is touched while parsing
validation = hook.validation
tables = pipeline_tables(hook.settings)
maintained = AssetAny(*(hook.asset(table) for table in tables))
timetable = timetable_for(validation.schedule)

with DAG(
    dag_id="validate_output",
    description="Reconcile the Delta tables with Kafka's offsets and the checkpoint; check the rows (GX).",
    doc_md=__doc__,
    schedule=maintained if timetable is None else AssetOrTimeSchedule(timetable=timetable, assets=maintained),
    start_date=start_date(hook.settings, timetable),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(hours=1),
    default_args={"owner": "streamwarden", "retries": 0},
    tags=["streamwarden", "tables", "validation"],
    params={
        "tables": Param([], type="array", items={"type": "string", "enum": list(tables)}, examples=list(tables),
                        description="Tables whose rows the data expectations check; empty: all."),
        "checks": Param([], type="array", items={"type": "string", "enum": [c.value for c in Check]},
                        examples=[c.value for c in Check], description="Checks to make; empty: all."),
        "versions": Param({}, type="object", additionalProperties={"type": "integer", "minimum": 0},
                          description='A version of each table to check instead of the newest, e.g. '
                          '{"session_rows": 41, "quarantine": 40}.'),
        "as_of": Param(None, type=["null", "string"], description="Check the tables as they were at this ISO 8601 time "
                       "(e.g. 2026-11-23T14:00:00Z); empty: now."),
        "rows": Param("new", type="string", enum=["new", "all"], description="Rows the data expectations check: "
                      "new (committed since each table's last validated version) or all."),
    },
) as dag:
    check_params = CheckValidationParamsOperator(task_id="check_params")
    validate_tables = ValidateTablesOperator(task_id="validate_tables", params_task_id="check_params")
    report_and_alert = ValidationReportOperator(task_id="report_and_alert", params_task_id="check_params",
                                                validate_task_id="validate_tables")

    check_params >> validate_tables >> report_and_alert
