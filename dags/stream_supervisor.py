"""
### Stream supervisor

Keeps the Streamwarden stream (Kafka -> Spark Structured Streaming -> Parquet) running.

Every two minutes:

1. **check_health** reads the stream's status from its files (checkpoint lease, heartbeat,
   `last_failure.json`), logs it as a table and pushes it to XCom.
2. **choose_action** branches:
   - not running -> **start_stream** launches `spark-submit jobs/stream.py` *detached* and ends as soon
     as the stream holds its checkpoint lease (no worker slot is held while the stream runs);
   - running and `force_restart` -> **stop_stream** (stop marker, drain, then SIGTERM/SIGKILL) and
     **start_stream**;
   - running -> **healthy**.

Start and stop run in the `stream_lifecycle` pool (1 slot; `streamwarden up` creates it, elsewhere:
`airflow pools set stream_lifecycle 1 "Streamwarden start/stop"`), so they never overlap. The stream
refuses to start twice on one checkpoint (lease), whatever triggers it.

Manual runs take `force_restart` and a free-text `reason` (logged by the start/stop steps).
To stop the stream for good: pause this DAG, then `streamwarden stop --wait 120`.

Settings: `STREAMWARDEN_*` in the environment of the Airflow workers. Spark: connection `spark_default`,
whose master must equal `STREAMWARDEN_SPARK_MASTER`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Param, TriggerRule, task

from streamwarden.control import next_action
from streamwarden_airflow.operators import StartStreamOperator, StopStreamOperator, StreamStatusOperator

ACTION_TASKS = {"start": ["start_stream"], "restart": ["stop_stream", "start_stream"], "healthy": ["healthy"]}

with DAG(
    dag_id="stream_supervisor",
    description="Keep the Streamwarden stream running: check health, start it when it is not running.",
    doc_md=__doc__,
    schedule="*/2 * * * *",
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(minutes=10),
    default_args={"owner": "streamwarden", "retries": 0},
    tags=["streamwarden", "stream", "lifecycle"],
    params={
        "force_restart": Param(False, type="boolean", description="Stop and start a running stream."),
        "reason": Param("", type="string", description="Why this run was triggered (logged)."),
    },
) as dag:
    check_health = StreamStatusOperator(task_id="check_health")

    @task.branch(task_id="choose_action")
    def choose_action(status: dict[str, Any], **context: Any) -> list[str]:
        """Start a stopped stream, restart on request, otherwise nothing to do."""
        return ACTION_TASKS[next_action(status["running"], bool(context["params"]["force_restart"]))]

    stop_stream = StopStreamOperator(task_id="stop_stream")
    start_stream = StartStreamOperator(task_id="start_stream",
                                       trigger_rule=TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS)
    healthy = EmptyOperator(task_id="healthy")

    decision = choose_action(check_health.output)
    decision >> [stop_stream, start_stream, healthy]
    stop_stream >> start_stream
