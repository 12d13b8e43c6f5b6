"""The DAGs import cleanly, document themselves, and the supervisor branches on the stream's real status."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from streamwarden.lease import CheckpointLease
from streamwarden.settings import load_settings

REPO = Path(__file__).resolve().parents[1]
# start/stop are marked successful instead of run: launching the real stream is the end-to-end test's job.
LIFECYCLE_TASKS = r"^(start_stream|stop_stream)$"


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
    assert {t.task_id: t.pool for t in dag.tasks if t.task_id.endswith("_stream")} == {
        "start_stream": "stream_lifecycle", "stop_stream": "stream_lifecycle"}
    assert dag.get_task("check_health").downstream_task_ids == {"choose_action"}
    assert dag.get_task("choose_action").downstream_task_ids == {"start_stream", "stop_stream", "healthy"}


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
    return tmp_path


@pytest.mark.usefixtures("airflow_db", "stream_home")
def test_supervisor_starts_a_stream_that_is_not_running() -> None:
    states = _run_supervisor()
    assert states == {"check_health": "success", "choose_action": "success", "start_stream": "success",
                      "stop_stream": "skipped", "healthy": "skipped"}


@pytest.mark.usefixtures("airflow_db", "stream_home")
@pytest.mark.parametrize(("force_restart", "expected"), [
    (False, {"healthy": "success", "start_stream": "skipped", "stop_stream": "skipped"}),
    (True, {"healthy": "skipped", "start_stream": "success", "stop_stream": "success"}),
])
def test_supervisor_with_a_running_stream(force_restart: bool, expected: dict[str, str]) -> None:
    settings = load_settings()
    with CheckpointLease(settings.lease_path, settings.checkpoint_location):  # this process is "the stream"
        states = _run_supervisor({"force_restart": force_restart, "reason": "test"})
    assert {k: states[k] for k in expected} == expected
    assert states["check_health"] == states["choose_action"] == "success"


def test_spark_submit_command_comes_from_the_spark_connection(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import airflow  # noqa: F401 - puts the plugins folder on sys.path

    from streamwarden_airflow.hooks import StreamwardenHook

    monkeypatch.setenv("STREAMWARDEN_HOME", str(tmp_path))
    monkeypatch.setenv("STREAMWARDEN_SPARK_MASTER", "local[1]")
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    hook = StreamwardenHook()
    command = hook.spark_submit_command(hook.settings, REPO / "jobs" / "stream.py")
    assert Path(command[0]).is_file() and command[0].endswith("spark-submit")
    assert command[command.index("--master") + 1] == "local[1]"
    assert command[-1] == str(REPO / "jobs" / "stream.py")

    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT")  # the provider then silently means YARN
    with pytest.raises(ValueError, match="'yarn'"):
        hook.spark_submit_command(hook.settings, REPO / "jobs" / "stream.py")
