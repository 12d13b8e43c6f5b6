"""
### Upgrade the stream: a new release of settings (and session handler), watched, rolled back by itself

Moves the running stream to a **release**: a YAML file of settings, in the format of `STREAMWARDEN_CONFIG_FILE`,
that an operator installs as `<STREAMWARDEN_HOME>/releases/<name>.yaml` (e.g. `session_handler:
mypkg.handlers:SessionsV2`, `table_schema: {...}`, `trigger_interval: 10s`). The run checks the release against
the checkpoint and the tables before anything changes, drains the stream, keeps a copy of its checkpoint,
starts the release, watches it with the warden's verdict, and rolls back to the copy and the previous release
by itself when the new version is unhealthy, with nothing lost. The outcome is alerted either way. Manual runs
only. Details, the release file and the limits: `docs/upgrade.md`.

#### Steps

1. **check_params** checks every Param and the release file at once (a plain name, a file inside the releases
   folder, known settings, none a release may not change, valid values); a bad one fails here, naming it.
2. **check_compatibility**: the release's session handler loads and keeps the checkpoint's *state layout* (its
   fingerprint equals `<checkpoint>/streamwarden_handler.json`: handler name, `state_version`, `state_schema`,
   the checkpoint's `session_buckets` unless set, and its `session_slots`); the columns it would write to
   `session_rows`, compared by name with the table's: an added nullable column is allowed (Delta schema evolution), a
   dropped, retyped or not-nullable one is refused with the column and why; settings pinned by the checkpoint
   or the tables are refused.
3. **stop_if_dry_run**: with `dry_run` (the default) the run stops here; only **report_and_alert** follows.
4. **hold_and_drain** (pool `stream_lifecycle`): the run *holds* the stream (`<run_root>/hold.json`: the
   supervisor decides nothing, no launch and no maintenance), then stops it: drain, then SIGTERM, SIGKILL.
5. **copy_checkpoint**: the rollback point: the checkpoint copied to
   `<checkpoint_root>/archive/<time>-upgrade-<run>/`, each table's Delta version and the release in force, in
   the run's journal `<run_root>/upgrades/<run>/journal.json`.
6. **evolve_schema**: the release's added columns added to `session_rows` (nullable; older rows read null).
7. **activate_release**: `<run_root>/release/active.json` names the release; every launch applies it (the
   supervisor's restarts too).
8. **start_new** (pool): the stream started detached with the release (spark-submit), held for the watch.
9. **watch_health** (sensor, reschedule mode): the warden's verdict every `POKE_INTERVAL`; fails at once on
   `FAILED`, `HUNG` or `DEAD`, or when no batch committed while records wait; succeeds after `health_minutes`
   of a running stream, and hands the stream back to the supervisor (the hold is released). A new version
   that failed with `ENVIRONMENT` (broker or store unreachable) is started again up to three times first.
10. **rollback** (pool; runs only when a step from `hold_and_drain` on failed): holds and stops the stream,
    restores each table to its rollback version *together with the offsets it claims* (a plain Delta restore
    would make the replay be skipped as committed), moves the new version's checkpoint to the archive and puts
    the copy back, makes the previous release active, starts the old version and confirms it runs. Skipped when
    the run never held the stream.
11. **report_and_alert** (runs whatever happened) alerts the outcome: `UPGRADE_CHECKED`, `UPGRADE_UPGRADED`
    (info), `UPGRADE_REFUSED(CONFIG)`, `UPGRADE_ROLLED_BACK(<class>)` (warning), `UPGRADE_ROLLBACK_FAILED`
    (critical), with the failure class, the evidence (step, message, verdict, the stream's failure, tables
    restored) and the next action; it fails the run unless the release was checked or runs healthy.

Every step keeps its work in the journal and checks the actual state before acting, so a step re-run after its
worker was killed finishes the work instead of doing it twice.

#### Params

- `release`: one of the releases installed as `<STREAMWARDEN_HOME>/releases/<name>.yaml`, picked from the form's
  dropdown (over REST: its name, never a path). A release installed after Airflow parsed this file is offered
  once the dag-processor parses it again (`[dag_processor] min_file_process_interval`, 30 s by default).
- `health_minutes`: how long the new version must run healthy (0.25 to 240 minutes, fractions allowed).
- `dry_run`: `true` (default): check the Params, the release and its compatibility, change nothing.
- `reason`: why (kept in the hold, the journal and the alert).

#### Settings

The release may set any `STREAMWARDEN_*` setting except the roots (`HOME`, `OUTPUT_ROOT`, `CHECKPOINT_ROOT`,
`STATE_ROOT`, `RUN_ROOT`), `QUERY_NAME`, `PIPELINE`, `OUTPUT_PARTITION_BY`, `SESSION_BUCKETS`,
`SHUFFLE_PARTITIONS` and the state store's `SPARK_CONF` keys. The watch uses the warden's settings
(`STREAMWARDEN_WARDEN_POKE_INTERVAL`, `STARTUP_GRACE`, `HEARTBEAT_FLOOR`, `DRAIN_TIMEOUT`, `TERM_TIMEOUT`,
`LEASE_TIMEOUT`). Spark: connection `spark_default`, as for `stream_supervisor`.

#### When it fails

- **UPGRADE_REFUSED (CONFIG)**: nothing changed. Fix what the message names (the Param, the release file, the
  handler's state layout, a column) and trigger again; a state layout change needs a recovery onto a new
  checkpoint instead.
- **UPGRADE_ROLLED_BACK (BUG, CONFIG, ...)**: the old version runs again with its state and every offset. Read the
  stream log under `run/logs` (the new version's failing batch), fix the release, install it under a new name,
  and trigger with `dry_run=true` first.
- **UPGRADE_ROLLBACK_FAILED**: the stream stays held stopped. Fix the cause named in the rollback's log (storage,
  broker), then clear the **rollback** task of the run: it resumes from the journal. Only if that cannot work:
  `streamwarden release-hold` and restore by hand from the journal's rollback point.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow.providers.standard.operators.python import ShortCircuitOperator
from airflow.sdk import DAG, Param

from streamwarden.params import MAX_REASON
from streamwarden.settings import load_settings
from streamwarden.upgrade.release import installed_releases
from streamwarden.upgrade.request import DEFAULT_HEALTH_MINUTES, MAX_HEALTH_MINUTES, MIN_HEALTH_MINUTES
from streamwarden.warden.settings import load_warden_settings
from streamwarden_airflow.operators.upgrade import (
    ActivateReleaseOperator,
    CheckCompatibilityOperator,
    CheckUpgradeParamsOperator,
    CopyCheckpointOperator,
    EvolveSchemaOperator,
    HoldAndDrainOperator,
    RollbackOperator,
    StartNewVersionOperator,
    UpgradeReportOperator,
    proceed_unless_dry_run,
)
from streamwarden_airflow.sensors.upgrade import UpgradeHealthSensor

warden = load_warden_settings()
# The form's dropdown offers the installed releases (null: none chosen yet). A release installed later is offered,
# and accepted by the REST API, once the dag-processor parses this file again (within its parse interval).
installed = installed_releases(load_settings())
NONE_CHOSEN = "(choose a release)" if installed else "(no release installed under releases/)"
WATCH_TIMEOUT = MAX_HEALTH_MINUTES * 60 + 2 * warden.startup_grace + 600

with DAG(
    dag_id="upgrade_stream",
    description="Upgrade the stream to a release: check, drain, copy, start, watch; roll back by itself.",
    doc_md=__doc__,
    schedule=None,
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    default_args={"owner": "streamwarden", "retries": 0},
    tags=["streamwarden", "stream", "lifecycle", "upgrade"],
    params={
        "release": Param(None, type=["null", "string"], maxLength=64, enum=[None, *installed],
                         values_display={"null": NONE_CHOSEN, **{name: name for name in installed}},
                         description="One of the releases installed as <STREAMWARDEN_HOME>/releases/<name>.yaml "
                                     f"({', '.join(installed) or 'none yet'})."),
        "health_minutes": Param(DEFAULT_HEALTH_MINUTES, type="number", minimum=MIN_HEALTH_MINUTES,
                                maximum=MAX_HEALTH_MINUTES,
                                description="How long the new version must run healthy before the upgrade stands."),
        "dry_run": Param(True, type="boolean", description="Only check the release and its compatibility."),
        "reason": Param(None, type=["null", "string"],
                        maxLength=MAX_REASON, description="Why (kept in the journal and alert)."),
    },
) as dag:
    check_params = CheckUpgradeParamsOperator(task_id="check_params")
    check_compatibility = CheckCompatibilityOperator(task_id="check_compatibility")
    stop_if_dry_run = ShortCircuitOperator(task_id="stop_if_dry_run", python_callable=proceed_unless_dry_run,
                                           ignore_downstream_trigger_rules=False)
    hold_and_drain = HoldAndDrainOperator(task_id="hold_and_drain")
    copy_checkpoint = CopyCheckpointOperator(task_id="copy_checkpoint")
    evolve_schema = EvolveSchemaOperator(task_id="evolve_schema")
    activate_release = ActivateReleaseOperator(task_id="activate_release")
    start_new = StartNewVersionOperator(task_id="start_new")
    watch_health = UpgradeHealthSensor(task_id="watch_health", poke_interval=warden.poke_interval,
                                       timeout=timedelta(seconds=WATCH_TIMEOUT))
    rollback = RollbackOperator(task_id="rollback")
    report_and_alert = UpgradeReportOperator(task_id="report_and_alert")

    changes = [hold_and_drain, copy_checkpoint, evolve_schema, activate_release, start_new, watch_health]
    check_params >> check_compatibility >> stop_if_dry_run >> hold_and_drain >> copy_checkpoint >> evolve_schema
    evolve_schema >> activate_release >> start_new >> watch_health
    changes >> rollback >> report_and_alert
    watch_health >> report_and_alert
    [check_params, check_compatibility] >> report_and_alert  # not stop_if_dry_run: it would skip the report
