"""
### Restart sessions: ask every collection site for a fresh session, and put a bound on what a break can lose

When integrity breaks upstream (a lost message, an expired offset, a producer bug), a site's session is
damaged from that point until the site opens a new one: under `STREAMWARDEN_ON_GAP=resync` its records go
to `quarantine` until then. Restarting sessions on a schedule bounds that loss to one interval. This DAG
asks each site, on the control topic (`STREAMWARDEN_CONTROL_TOPIC`, default `streamwarden-control`), to end
its sessions and open new ones with full snapshots, confirms from `session_rows` that each did, and
reports every site's **exposure**: the time since its last clean session start. Runs on
`STREAMWARDEN_SESSION_RESTART_SCHEDULE` (default `@daily`), or by hand.

#### Steps

1. **check_params** checks the Params and the `STREAMWARDEN_SESSION_RESTART_*` settings; a bad one fails
   here, naming it. Nothing is sent.
2. **plan_restarts** lists the site topics on the broker (those `STREAMWARDEN_TOPIC_PATTERN` matches) that
   the Params target, and gives each a turn, spread evenly over the jitter window in an order shuffled per
   run, so their snapshots do not land in one micro-batch; and a deadline (its turn + `DEADLINE`). Logs the
   plan as a table.
3. **send_commands** publishes one `restart_session` command per site (request id, reason, turn,
   deadline; contract in `docs/wire-format.md`); fails unless every one is delivered.
4. **wait_for_new_sessions** (sensor, reschedule mode: no worker slot held between pokes) asks the newest
   `session_rows` every `POKE_INTERVAL` for snapshot rows naming each request (`restart_request`), until
   all sites answered or the last deadline passed; then, for at most `CATCH_UP`, until the stream has read
   the silent sites' topics up to their deadline (a running stream is seconds behind).
5. **report_and_alert** (runs whatever happened) logs per site: answered (when, partition and offset), new
   sessions, last clean session start, exposure, damaged sessions, records lost since its previous restart
   (integrity dead letters) and their span; writes `<run_root>/session_restarts/<time>.json`; alerts on
   - **RESTART_UNANSWERED**: sites with no new session by their deadline although the stream read their
     topics past it, with their last clean start and its age;
   - **STREAM_NOT_RUNNING** (the stream committed nothing after the deadline) and **STREAM_BEHIND** (it
     had not read that far yet): the sites are not blamed; the evidence names each partition's committed
     offset and the stream's last commit;
   - **EXPOSURE**: sites whose last clean start is older than `EXPOSURE_FACTOR` (1.5) x the interval;
   and then fails the run.

#### Params (manual runs; a scheduled run restarts every site with the settings)

- `sites`: site topics to restart, e.g. `["sites-3"]`; empty: all (or the pattern).
- `pattern`: a regular expression the site topics must fully match, e.g. `sites-1.*`; not with `sites`.
- `reason`: sent with each command and kept in the report.
- `jitter`, `deadline`: durations (`2m`) overriding the settings for this run.

#### Settings (`STREAMWARDEN_SESSION_RESTART_*`, read by the scheduler and the workers)

`SCHEDULE` (`@daily`; a cron expression, a preset, a duration such as `6h`, or `none`), `JITTER` (`5m`:
the window the sites' turns are spread over; keep it above sites x trigger interval), `DEADLINE` (`10m`
after a site's turn), `POKE_INTERVAL` (`30s`), `CATCH_UP` (`10m`), `EXPOSURE_FACTOR` (`1.5`).
`validate_output` reports the exposure too and alerts on it the same way.

#### When it fails

- **RESTART_UNANSWERED**: the site did not act on the command (not reading the control topic, down, or
  not implementing `restart_session`). Check the collection point, then trigger this DAG with
  `{"sites": [<site>], "reason": "retry"}`. Until it restarts, a break in its data is not repaired.
- **STREAM_NOT_RUNNING** / **STREAM_BEHIND**: the answers may be in Kafka but not yet in the table. Check
  `stream_supervisor` (trigger it with `force_restart` if its breaker is open), then trigger this DAG again.
- **EXPOSURE**: a site has gone longer than 1.5 intervals without a clean start: trigger this DAG with
  `{"sites": [<sites named>]}`; if it is not scheduled, set `STREAMWARDEN_SESSION_RESTART_SCHEDULE`.
- **CONFIG** (a Param, a setting, a site not on the broker) or **ENVIRONMENT** (the broker or storage):
  fix what the message names and trigger again. Sites act on each request id once, so a repeated command
  does no harm.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG, Param

from streamwarden_airflow.hooks.tables import DeltaTablesHook
from streamwarden_airflow.operators.session_restarts import (
    CheckRestartParamsOperator,
    PlanRestartsOperator,
    RestartReportOperator,
    SendRestartCommandsOperator,
)
from streamwarden_airflow.sensors.session_restarts import NewSessionsSensor
from streamwarden_airflow.timetables import start_date, timetable_for

hook = DeltaTablesHook()  # settings only: nothing is read from the broker or the tables while parsing
restarts = hook.restarts
timetable = timetable_for(restarts.schedule)

with DAG(
    dag_id="restart_sessions",
    description="Ask every collection site to restart its sessions; confirm the new sessions; report exposure.",
    doc_md=__doc__,
    schedule=timetable,
    start_date=start_date(hook.settings, timetable),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(days=1),
    default_args={"owner": "streamwarden", "retries": 0},
    tags=["streamwarden", "sessions", "control"],
    params={
        "sites": Param([], type="array", items={"type": "string"}, examples=["sites-0"],
                       description="Site topics to restart; empty: every site (or the pattern)."),
        "pattern": Param(None, type=["null", "string"],
                         description="A regular expression the site topics must fully match "
                         "(e.g. sites-1.*); not with sites."),
        "reason": Param(None, type=["null", "string"], maxLength=500, description="Why; sent with each command."),
        "jitter": Param(None, type=["null", "string"], description=f"Spread the sites' turns over this long (e.g. 2m); "
                        f"empty: {restarts.jitter:.0f}s."),
        "deadline": Param(None, type=["null", "string"],
                          description=f"Each site's time to answer after its turn; empty: "
                          f"{restarts.deadline:.0f}s."),
    },
) as dag:
    check_params = CheckRestartParamsOperator(task_id="check_params")
    plan_restarts = PlanRestartsOperator(task_id="plan_restarts", params_task_id="check_params")
    send_commands = SendRestartCommandsOperator(task_id="send_commands", plan_task_id="plan_restarts")
    wait_for_new_sessions = NewSessionsSensor(task_id="wait_for_new_sessions", plan_task_id="plan_restarts",
                                              poke_interval=restarts.poke_interval, timeout=timedelta(days=1))
    report_and_alert = RestartReportOperator(task_id="report_and_alert", plan_task_id="plan_restarts",
                                             step_ids=["check_params", "plan_restarts", "send_commands"])

    check_params >> plan_restarts >> send_commands >> wait_for_new_sessions >> report_and_alert
