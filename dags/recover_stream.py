"""
### Recover the stream: roll the tables back, replay from Kafka, prove the result (manual, approval first)

When the output is wrong or the stream cannot go on (the warden escalated `DATA_LOSS`, `INTEGRITY`,
`MALFORMED`; `validate_output` found gaps, duplicates or a checkpoint mismatch), this DAG replaces the
manual repair of tables, checkpoint and offsets. Its alerts and the warden's name it with the Params to use.
It **plans first and shows the blast radius**; a dry run (the default) stops there. For real, it waits for
a person to approve the plan, then acts, and proves the result with validate_output's checks.

#### Steps

1. **check_params** checks every Param (below); a bad one fails here, naming it. Nothing is read or changed.
2. **plan_recovery** resolves the target to a version of each table and plans: per table the versions and
   rows undone, per topic-partition the offset the new checkpoint starts from, what the tables hold, Kafka's
   log start and end, records replayed and **lost for good** (no longer in Kafka), sessions that cannot be
   rebuilt, and the replay time at the stream's measured rate. Logged as tables, pushed to XCom, written to
   `<run_root>/recoveries/<id>/plan.json`. Versions that do not exist, offsets past the log end or on
   unknown partitions: refused here. A compaction a killed maintenance run left unproven is proven first (or
   reverted), as the next maintain_tables run would; one still running fails the step (ENVIRONMENT): run again.
3. **stop_if_dry_run**: a dry run ends here (report_and_alert still reports).
4. **approve**: Airflow's approval request (Required actions in the UI, or the REST API's `hitlDetails`)
   showing the plan. **Reject**, or no answer within 6 hours, changes nothing. The answer is recorded (its
   `answer` XCom: approved, rejected by whom and when, timed out, or the request failed) for the report.
5. **hold_and_stop** (pool `stream_lifecycle`) holds the stream (`<run_root>/hold.json`: the warden, the
   launcher and maintenance keep off), drains and stops it, and plans again with the approved versions
   (the stream committed until it stopped); if more would now be lost than approved it stops, changing
   nothing but the hold.
6. **archive_checkpoint** moves the checkpoint to `<checkpoint_root>/archive/<time>-<id>/` (never deleted).
7. **restore_tables** restores each table to its target version **with the offsets it claims** (one Delta
   commit each, named after the recovery, checked afterwards: a plain Delta restore would make the replay
   skip the undone offsets as already written). The last validated versions follow.
8. **seed_checkpoint** creates the new checkpoint holding only the offsets to start from, and records the
   recovery (undone, replayed, lost) in `<run_root>/recoveries.jsonl`.
9. **start_stream** (pool) releases the hold and starts the stream on the new checkpoint through the
   warden's launcher; stream_supervisor watches it from then on.
10. **wait_caught_up** (sensor, reschedule mode) waits until the stream has committed up to the log end
    the plan saw on every partition.
11. **validate** runs validate_output's checks (coverage, checkpoint, Kafka, audit, expectations) and
    records the report and the last validated versions; fails unless they pass.
12. **report_and_alert** (runs whatever happened) writes `<run_root>/recoveries/<id>/report.json` and
    alerts the outcome: dry run; not approved (rejected by a person, not answered before the timeout, the
    request failed, or no answer recorded, each with its own next action); recovered and validated; or the
    failed step with its class and evidence.

Every step is idempotent: after a kill -9 (or any failure), clearing the failed task finishes the recovery
(the hold keeps the warden off meanwhile; the restore finds its own commit, the archive and the seeded
checkpoint are checked before anything is done again).

#### Params

- `target`: `last_validated` (default: each table's newest version that passed validate_output),
  `versions`, `as_of` or `offsets`.
- `versions`: a version of every table, e.g. `{"session_rows": 41, "quarantine": 40}` (with `versions`).
- `as_of`: an ISO-8601 time; each table's newest version committed by then (with `as_of`).
- `offsets`: topic -> partition -> offset to resume from, e.g. `{"sites-0": {"0": 1200}}` (with
  `offsets`): the tables stay as they are; partitions not named resume where the tables end. Offsets
  skipped forward, and those Kafka no longer holds, are counted as lost and recorded.
- `dry_run` (default **true**): plan only.
- `reason`: kept in the plan, the report and `recoveries.jsonl`.

#### When it fails

- **CONFIG** at check_params or plan_recovery: fix the Param the message names; nothing changed.
- A step after approval: the alert names the step, its failure class and evidence. The stream stays held
  (`streamwarden status`; run/hold.json) so nothing restarts it on a half-made checkpoint. Fix the cause,
  then **clear the failed task** of the same run. To give up instead: the old checkpoint is under
  `<checkpoint_root>/archive/`; `streamwarden release-hold` lets the warden start the stream again.
- **validate** failed: the report names the finding; trigger recover_stream again (a dry run first) or
  validate_output after fixing the cause.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow.providers.standard.operators.python import ShortCircuitOperator
from airflow.sdk import DAG, Param

from streamwarden.params import MAX_REASON
from streamwarden_airflow.operators.approval import RecordedApprovalOperator
from streamwarden_airflow.operators.recovery import (
    APPROVAL_TASK,
    ArchiveCheckpointOperator,
    CheckRecoveryParamsOperator,
    HoldAndStopOperator,
    PlanRecoveryOperator,
    RecoveryReportOperator,
    RestoreTablesOperator,
    SeedCheckpointOperator,
    StartStreamOperator,
    ValidateAfterRecoveryOperator,
)
from streamwarden_airflow.sensors.recovery import CaughtUpSensor

APPROVAL_BODY = """{{ ti.xcom_pull(task_ids='plan_recovery', key='markdown') }}

Approve to stop the stream, archive its checkpoint, restore the tables and replay from the offsets above.
Rejecting, or no answer within 6 hours, changes nothing."""


def _not_dry_run(ti: object) -> bool:
    request = ti.xcom_pull(task_ids="check_params")  # type: ignore[attr-defined]
    return not bool(request and request["dry_run"])


with DAG(
    dag_id="recover_stream",
    description="Roll the tables back to a validated version (or resume from given offsets), replay from Kafka, "
                "validate; plan and approval first.",
    doc_md=__doc__,
    schedule=None,
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    default_args={"owner": "streamwarden", "retries": 0},
    tags=["streamwarden", "recovery"],
    params={
        "target": Param("last_validated", type="string", enum=["last_validated", "versions", "as_of", "offsets"],
                        description="What to recover to."),
        "versions": Param({}, type="object", description='With target versions: e.g. {"session_rows": 41, '
                          '"quarantine": 40}.'),
        "as_of": Param(None, type=["null", "string"], description="With target as_of: an ISO-8601 time."),
        "offsets": Param({}, type="object", description='With target offsets: e.g. {"sites-0": {"0": 1200}}.'),
        "dry_run": Param(True, type="boolean", description="Plan only (default)."),
        "reason": Param(None, type=["null", "string"],
                        maxLength=MAX_REASON, description="Why; kept with the recovery."),
    },
) as dag:
    check_params = CheckRecoveryParamsOperator(task_id="check_params")
    plan_recovery = PlanRecoveryOperator(task_id="plan_recovery")
    stop_if_dry_run = ShortCircuitOperator(task_id="stop_if_dry_run", python_callable=_not_dry_run,
                                           ignore_downstream_trigger_rules=False)
    approve = RecordedApprovalOperator(
        task_id=APPROVAL_TASK,
        subject="recover_stream: approve recovery {{ ti.xcom_pull(task_ids='plan_recovery')['recovery_id'] }}",
        body=APPROVAL_BODY, defaults="Reject", response_timeout=timedelta(hours=6))
    hold_and_stop = HoldAndStopOperator(task_id="hold_and_stop")
    archive_checkpoint = ArchiveCheckpointOperator(task_id="archive_checkpoint")
    restore_tables = RestoreTablesOperator(task_id="restore_tables")
    seed_checkpoint = SeedCheckpointOperator(task_id="seed_checkpoint")
    start_stream = StartStreamOperator(task_id="start_stream")
    wait_caught_up = CaughtUpSensor(task_id="wait_caught_up", plan_task_id="hold_and_stop", poke_interval=10,
                                    timeout=timedelta(hours=12))
    validate = ValidateAfterRecoveryOperator(task_id="validate")
    report_and_alert = RecoveryReportOperator(task_id="report_and_alert")

    (check_params >> plan_recovery >> stop_if_dry_run >> approve >> hold_and_stop >> archive_checkpoint
     >> restore_tables >> seed_checkpoint >> start_stream >> wait_caught_up >> validate >> report_and_alert)
