"""The DAGs import cleanly, document themselves, and the supervisor branches on the stream's real status."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from fixtures import REPO
from streamwarden.alerts import read_alerts
from streamwarden.runfiles.heartbeat import Heartbeat, write_heartbeat
from streamwarden.runfiles.lease import CheckpointLease
from streamwarden.settings import load_settings
from streamwarden.warden.lag_history import read_lag_history

# restart is marked successful instead of run: launching the real stream is the job of
# tests/drills/warden/test_supervisor.py.
LIFECYCLE_TASKS = r"^restart_stream$"


@pytest.fixture(scope="module")
def dagbag() -> Any:
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(REPO / "dags"))


def test_dags_import_without_errors(dagbag: Any) -> None:
    assert dagbag.import_errors == {}
    assert "stream_supervisor" in dagbag.dags


def test_every_dag_is_documented_tagged_and_owned(dagbag: Any) -> None:
    for dag_id, dag in dagbag.dags.items():
        assert dag.doc_md and len(dag.doc_md) > 100, dag_id
        assert dag.tags, dag_id
        assert all(task.owner not in ("", "airflow") for task in dag.tasks), dag_id


def test_supervisor_shape(dagbag: Any) -> None:
    dag = dagbag.dags["stream_supervisor"]
    assert set(dag.params.keys()) == {"force_restart", "reason"}
    assert dag.params["force_restart"] is False
    assert dag.max_active_runs == 1 and dag.catchup is False
    restart = dag.get_task("restart_stream")
    assert restart.pool == "stream_lifecycle" and restart.spark_conn_id == "spark_default"
    assert {t.task_id for t in dag.tasks if "reason" in t.template_fields} == {"decide_action", "restart_stream"}
    for task in (dag.get_task("decide_action"), restart):  # the run's reason, empty without one
        assert task.render_template(task.reason, {"params": {"reason": "fixed it"}}) == "fixed it"
        assert task.render_template(task.reason, {"params": {}}) == ""
        assert task.render_template(task.reason, {"params": {"reason": None}}) == ""  # the form's empty field
    assert {t.task_id for t in dag.tasks if t.pool == "stream_lifecycle"} == {"restart_stream", "keep_standby"}
    assert {t.task_id: t.mode for t in dag.tasks if hasattr(t, "poke")} == {"wait_for_backoff": "reschedule"}
    # woken by the continuous watch (an asset watcher in the triggerer) or every two minutes
    schedule = dag.timetable
    assert type(schedule).__name__ == "AssetOrTimeSchedule", schedule
    assert schedule.timetable.expression == "*/2 * * * *"
    watch = schedule.asset_condition
    assert watch.name == "streamwarden_stream_watch"
    assert [type(w.trigger).__name__ for w in watch.watchers] == ["StreamWatchTrigger"]
    assert dag.get_task("check_health").downstream_task_ids == {"decide_action"}
    assert dag.get_task("decide_action").downstream_task_ids == {
        "healthy", "notify_degraded", "wait_for_backoff", "escalate"}
    assert dag.get_task("wait_for_backoff").downstream_task_ids == {"restart_stream"}
    assert dag.get_task("keep_standby").upstream_task_ids == {"healthy", "restart_stream"}
    for signal in ("HEARTBEAT_FLOOR", "MAX_RESTARTS_PER_HOUR", "LAG_WINDOW", "RETENTION_RISK", "force_restart"):
        assert signal in dag.doc_md


def _run_supervisor(conf: dict[str, Any] | None = None) -> dict[str, str | None]:
    """``dag.test()`` the supervisor as parsed from the DAG folder; the final state of every task."""
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=str(REPO / "dags")).dags["stream_supervisor"]
    run = dag.test(run_conf=conf, mark_success_pattern=LIFECYCLE_TASKS)
    return {ti.task_id: ti.state for ti in run.get_task_instances()}


@pytest.fixture()
def stream_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Settings of the tasks (they run in this process) pointing at empty temp roots."""
    monkeypatch.setenv("STREAMWARDEN_HOME", str(tmp_path))
    monkeypatch.setenv("STREAMWARDEN_BOOTSTRAP_SERVERS", "127.0.0.1:9")  # no broker: lag unknown, not fatal
    monkeypatch.setenv("STREAMWARDEN_WARDEN_BROKER_TIMEOUT", "1s")
    return tmp_path


@pytest.mark.usefixtures("airflow_db", "stream_home")
def test_supervisor_branches_to_restart_when_no_stream_runs() -> None:
    """No lease holder: DEAD, so the run waits out the (empty) backoff and branches to ``restart_stream``,
    which is marked successful here, not run."""
    states = _run_supervisor()
    assert states == {"check_health": "success", "decide_action": "success", "wait_for_backoff": "success",
                      "restart_stream": "success", "healthy": "skipped", "notify_degraded": "skipped",
                      "escalate": "skipped", "keep_standby": "success"}  # the standby is off: it says so
    (sample,) = read_lag_history(load_settings())  # the check's sample for the Streamwarden page's lag chart
    assert sample.total_lag == 0 and sample.input_rows_per_second is None


@pytest.mark.usefixtures("airflow_db", "stream_home")
@pytest.mark.parametrize(("force_restart", "expected"), [
    # alive and progressing, but the broker is unreachable: degraded, an alert and no restart
    (False, {"healthy": "skipped", "notify_degraded": "success", "restart_stream": "skipped"}),
    (True, {"healthy": "skipped", "notify_degraded": "skipped", "restart_stream": "success"}),
])
def test_supervisor_alerts_on_a_degraded_stream_or_branches_to_a_forced_restart(
        force_restart: bool, expected: dict[str, str]) -> None:
    """This process holds the lease and beats: a DEGRADED stream is alerted about (the alert is recorded),
    not restarted; ``force_restart`` branches to ``restart_stream`` instead (marked successful, not run)."""
    settings = load_settings()
    with CheckpointLease(settings.lease_path, settings.checkpoint_location):  # this process is "the stream"
        write_heartbeat(settings.run_paths.heartbeat, Heartbeat("idle", "q", "r", os.getpid(), batch_id=0))
        states = _run_supervisor({"force_restart": force_restart, "reason": "test"})
    assert {k: states[k] for k in expected} == expected
    assert states["check_health"] == states["decide_action"] == "success"
    alerts = read_alerts(settings.run_paths.alerts)
    if force_restart:
        assert alerts == []
    else:
        [alert] = alerts
        assert alert["severity"] == "warning" and alert["verdict"]["label"] == "DEGRADED"
        assert alert["source"].startswith("stream_supervisor/") and alert["deliveries"] == {"log": "sent"}


def test_spark_submit_command_comes_from_the_spark_connection(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import airflow  # noqa: F401 - puts the plugins folder on sys.path

    from streamwarden_airflow.hooks import StreamwardenHook

    monkeypatch.setenv("STREAMWARDEN_HOME", str(tmp_path))
    monkeypatch.setenv("STREAMWARDEN_SPARK_MASTER", "local[1]")
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_LOCAL", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    hook = StreamwardenHook(spark_conn_id="spark_local")
    command = hook.spark_submit_command(hook.settings, REPO / "jobs" / "stream.py")
    assert Path(command[0]).is_file() and command[0].endswith("spark-submit")
    assert command[command.index("--master") + 1] == "local[1]"
    assert command[-1] == str(REPO / "jobs" / "stream.py")

    monkeypatch.delenv("AIRFLOW_CONN_SPARK_LOCAL")  # the provider then silently means YARN
    with pytest.raises(ValueError, match="connection 'spark_local' gives master 'yarn'"):
        hook.spark_submit_command(hook.settings, REPO / "jobs" / "stream.py")
