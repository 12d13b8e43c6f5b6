"""
### Stream supervisor: the warden of the Streamwarden stream

Keeps the stream (Kafka -> Spark Structured Streaming -> Delta Lake) alive, never runs two, and calls a
person, with the reason and the next step, for what a restart cannot fix.

**When it runs**: the moment the **stream watch** sees the stream die, exit with a failure document or hang,
and every two minutes as a safety net. The watch is an event trigger in Airflow's triggerer (an asset watcher
of the asset `streamwarden_stream_watch`; no worker slot): every `WATCH_INTERVAL` (2s) it reads the checkpoint
lease (released by the kernel when its holder dies, kill -9 too), the exit document and the heartbeat, and
reports each dead, failed or hung process once; the asset event starts a run at once (its sighting is in the
run's log). A run of this DAG already under way finishes first (`max_active_runs=1`). Runs then:

1. **check_health** judges the stream once and pushes the verdict (JSON) to XCom; the log shows it as a
   table. A *starting* stream is left alone (judged again by the next run).
2. **decide_action** branches on the verdict:
   - `HEALTHY` (or `STARTING`) -> **healthy**: nothing to do;
   - `DEGRADED` -> **notify_degraded**: an alert, no restart;
   - `DEAD`, `HUNG` or `FAILED(ENVIRONMENT)` -> **wait_for_backoff** (sensor, reschedule mode) ->
     **restart_stream**: drain (stop marker), SIGTERM, then SIGKILL (a SIGSTOPped process is killed at
     once: it can neither drain nor handle SIGTERM), then `spark-submit jobs/stream.py` *detached* with the
     same checkpoint; the task ends once the new driver holds the checkpoint lease;
   - `FAILED(DATA_LOSS | INTEGRITY | MALFORMED | CONFIG | BUG)`, or the circuit breaker open ->
     **escalate**: an alert with the failure document and the recovery action, and the run fails (red).
     Nothing restarts until a person acts.
3. **keep_standby** (after `healthy` or `restart_stream`), when `STANDBY` is on: a warm standby beside the
   running stream, its Spark session started, waiting on the checkpoint lease; it takes over by itself the
   moment the stream's holder dies (a kill -9 is healed in seconds, before this DAG even runs). One at a time
   (its own lease); none while a recovery or an upgrade holds the stream; every stop stops it first. A takeover
   is alerted (info, once) by the next run. Off: the task says so and does nothing.

#### Signals and their settings (`STREAMWARDEN_WARDEN_*`, read by the workers)

- **alive**: a live process holds the checkpoint lease (a stopped one is alive but shows `stopped`).
- **starting**: launched, no lease or first heartbeat yet, for at most `STARTUP_GRACE` (240s); the first
  batch of a process (Python workers, state stores and the source warm up) also has this long.
- **progressing**: after its first batch, heartbeat age <= max(3 x trigger interval, `HEARTBEAT_FLOOR` (30s),
  3 x the p99 batch duration of the last hour), and the batch id moves within that time while records wait.
  Otherwise `HUNG` and restarted. The p99 (in the heartbeat) follows slow batches by itself; raise the floor
  only for a batch far slower than any of the last hour (a sudden backlog).
- **keeping up** (judged only while records wait, after a process's first batch): processed >=
  `KEEPUP_RATIO` (0.8) x input rows/s, and batch duration <= `BATCH_OVERRUN` (3) x trigger interval.
- **lag**: high watermark - committed offset per partition, max and total; Burrow's rules over the last
  `LAG_WINDOW` (10) checks of the current start: OK; WARN (offsets move, lag never shrinks over a full
  window); STALL (offset still, lag stays or grows); STOP (nothing committed for longer than the window's
  commits span); ERR (offset rewound). Before the first commit of a start it is STARTING (no alarm: the
  first batch is running). The lag is measured from the checkpoint against the broker whether or not the
  stream runs; from ListOffsets alone it is marked "at least" (a lower bound on Tansu), and when the broker
  does not answer it is UNKNOWN with the reason, never a total of 0.
- **retention risk**: the oldest unprocessed record is older than `RETENTION_RISK` (0.5) x the topic's
  `retention.ms` (a topic that does not report `retention.ms` has unknown retention: no verdict).
- **backoff**: the k-th start within an hour waits `BACKOFF_BASE` (30s) x 2^(k-2) after the previous one,
  at most `BACKOFF_MAX` (600s).
- **circuit breaker**: `MAX_RESTARTS_PER_HOUR` (3) starts within an hour stop automatic restarts (alert,
  the run fails).
- **stop**: drain for `DRAIN_TIMEOUT` (120s), then SIGTERM, then SIGKILL after `TERM_TIMEOUT` (30s).

Alerts go to the task log, to `STREAMWARDEN_WARDEN_WEBHOOK_URL` (JSON POST) and to
`STREAMWARDEN_WARDEN_EMAIL_TO` through the `smtp_default` connection, when set; all are recorded in
`<run_root>/alerts.jsonl`. Each carries the verdict, the failure class and document, the last progress and
the next action. The very first start of the stream on a run root is not alerted (nothing had run).
Restarts are recorded in `<run_root>/warden/restarts.json`, lag windows in `<run_root>/warden/health.json`.

#### Detection and healing times (measured: `tests/drills/dags/test_stream_watch_e2e.py`, 2 cores)

| fault | detected | next batch by a new process | what moves it |
|---|---|---|---|
| kill -9 of the stream | < 1 s (lease released) | about 30-45 s | `WATCH_INTERVAL`; Spark start-up and first batch |
| SIGSTOP / hung driver | about 31 s | about 60 s | `HEARTBEAT_FLOOR`, trigger interval, p99 batch |
| exit with a failure document | < 3 s | escalated, not restarted (a person acts) | - |

Healing is: the run starts (~1-2 s), check, decide and backoff (~3-4 s), stop (a dead stream: 0 s; a
stopped one is killed at once), spark-submit until the lease (~3 s), Spark session and query (~10 s), first
batch (~10-20 s). The restart alert says how long the stop and the start-up took. A restart within the hour of
an earlier one waits for the backoff first.

#### What to do

- **escalate failed with a failure class**: follow the recovery action in the alert (also in the task log),
  then trigger this DAG with `force_restart=true` and a `reason`: that overrides the failure and the breaker.
- **circuit breaker open**: read `run/logs/stream-*.log` and `run/last_failure.json`; fix, then force a
  restart as above (or wait: the breaker closes when the oldest start leaves the hour).
- **DEGRADED**: watch the lag table; add cores/executors, or raise `STREAMWARDEN_MAX_OFFSETS_PER_TRIGGER`.
- **Stop the stream for good**: pause this DAG, then `streamwarden stop --wait 120`.

#### Never two

`restart_stream` runs in the `stream_lifecycle` pool (1 slot; `streamwarden up` creates it, elsewhere:
`airflow pools set stream_lifecycle 1 "Streamwarden start/stop"`), and so must every task of any DAG that
starts or stops the stream. It leaves alone a stream someone else started since the check. The job's
checkpoint lease is the last guard: a second job on the same checkpoint exits 73, whoever starts it.
The stream runs detached (its own session), so no worker slot is held for its lifetime.

Spark: connection `spark_default`, whose master must equal `STREAMWARDEN_SPARK_MASTER`.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, AssetOrTimeSchedule, CronTriggerTimetable, Param

from streamwarden.settings import load_settings
from streamwarden.warden.settings import load_warden_settings
from streamwarden_airflow.operators import (
    AlertOperator,
    CheckHealthOperator,
    DecideOperator,
    KeepStandbyOperator,
    RestartStreamOperator,
)
from streamwarden_airflow.sensors import BackoffSensor
from streamwarden_airflow.timetables import start_date
from streamwarden_airflow.triggers import stream_watch_asset

warden = load_warden_settings()
every_two_minutes = CronTriggerTimetable("*/2 * * * *", timezone="UTC")

with DAG(
    dag_id="stream_supervisor",
    description="The warden: judge the stream's health, restart what a restart fixes, call a person otherwise.",
    doc_md=__doc__,
    schedule=AssetOrTimeSchedule(timetable=every_two_minutes, assets=stream_watch_asset()),
    start_date=start_date(load_settings(), every_two_minutes),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(seconds=warden.backoff_max + warden.startup_grace + 600),
    default_args={"owner": "streamwarden", "retries": 0},
    tags=["streamwarden", "stream", "lifecycle"],
    params={
        "force_restart": Param(False, type="boolean",
                               description="Restart now, overriding a failure class, the backoff and the breaker."),
        "reason": Param(None, type=["null", "string"],
                        description="Why this run was triggered (logged, and in alerts)."),
    },
) as dag:
    check_health = CheckHealthOperator(task_id="check_health")
    decide_action = DecideOperator(task_id="decide_action", health_task_id="check_health")
    healthy = EmptyOperator(task_id="healthy")
    notify_degraded = AlertOperator(task_id="notify_degraded", health_task_id="check_health",
                                    decide_task_id="decide_action")
    wait_for_backoff = BackoffSensor(task_id="wait_for_backoff", poke_interval=warden.poke_interval,
                                     timeout=warden.backoff_max + 60)
    restart_stream = RestartStreamOperator(task_id="restart_stream", health_task_id="check_health")
    escalate = AlertOperator(task_id="escalate", health_task_id="check_health", decide_task_id="decide_action",
                             fail_run=True)

    check_health >> decide_action >> [healthy, notify_degraded, wait_for_backoff, escalate]
    wait_for_backoff >> restart_stream
    keep_standby = KeepStandbyOperator(task_id="keep_standby", health_task_id="check_health")
    [healthy, restart_stream] >> keep_standby
