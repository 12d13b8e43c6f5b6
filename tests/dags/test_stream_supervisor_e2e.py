"""End to end with the real scheduler and API server: ``airflow standalone`` on a loopback port runs the
supervisor DAG triggered through the REST API, and it brings a stopped stream back."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from streamwarden.local.broker import LocalBroker, free_port
from streamwarden.local.up import AirflowApi
from streamwarden.processes import group_members
from streamwarden.warden.alerts import alerts_path, read_alerts
from streamwarden.warden.launcher import REPO_ENV, running_holder, venv_bin
from streamwarden.warden.stop import LIFECYCLE_POOL, stop_stream
from support import StreamProcess, produce_raw, stream_env

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def _wait(predicate: Callable[[], bool], timeout: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}; log:\n" \
                                            f"{log.read_text(errors='replace')[-3000:]}"
        time.sleep(1)


def test_supervisor_triggered_through_rest_brings_a_stopped_stream_back(
        broker: LocalBroker, topic_factory: Callable[..., list[str]], tmp_path: Path) -> None:
    topics = topic_factory(1, partitions=2)
    produce_raw(broker.bootstrap_servers, topics, 2_000)
    env = stream_env(tmp_path / "home", broker.bootstrap_servers, f"{topics[0].rsplit('-', 1)[0]}-.*")
    job = StreamProcess(env, tmp_path / "stream.log").start()
    settings = job.settings

    port = free_port()
    airflow_home = tmp_path / "airflow"
    airflow_env = {k: v for k, v in env.items() if not k.startswith("AIRFLOW")}
    airflow_env.update({
        "AIRFLOW_HOME": str(airflow_home), "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False", "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",  # only the run triggered below
        "AIRFLOW__API__HOST": "127.0.0.1", "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}", "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "STREAMWARDEN_WARDEN_POKE_INTERVAL": "2s", "STREAMWARDEN_WARDEN_HEARTBEAT_FLOOR": "60s",
        REPO_ENV: str(REPO), "PATH": os.pathsep.join([str(venv_bin()), os.environ.get("PATH", "")]),
    })
    log = tmp_path / "airflow.log"
    airflow_home.mkdir()
    with open(log, "wb") as out:
        airflow = subprocess.Popen([str(venv_bin() / "airflow"), "standalone"], env=airflow_env, stdout=out,
                                   stderr=subprocess.STDOUT, cwd=airflow_home, start_new_session=True)
    api = AirflowApi(f"http://127.0.0.1:{port}")
    try:
        # The stream runs, then is stopped (drained) while Airflow comes up.
        job.wait_until(settings.heartbeat_path.exists, 240, "the first heartbeat")
        assert job.stop() == 0, job.log_tail()
        assert running_holder(settings) is None

        passwords = airflow_home / "simple_auth_manager_passwords.json.generated"
        _wait(lambda: passwords.is_file() and api.healthy(), 240, "the API server", log)
        users = json.loads(passwords.read_text())
        api.login("admin", users["admin"])
        api.ensure_pool(LIFECYCLE_POOL, 1, "Streamwarden start/stop")
        _wait(lambda: api.dag("stream_supervisor") is not None, 180, "the DAG to be parsed", log)
        assert api.import_errors() == []

        status, run = api.call("POST", "/api/v2/dags/stream_supervisor/dagRuns",
                               {"logical_date": None, "conf": {"reason": "e2e: bring it back"}})
        assert status in (200, 201), run
        run_id = run["dag_run_id"]
        path = f"/api/v2/dags/stream_supervisor/dagRuns/{run_id}"
        _wait(lambda: api.call("GET", path)[1]["state"] in ("success", "failed"), 300, "the run to end", log)
        state = api.call("GET", path)[1]["state"]
        _, tasks = api.call("GET", f"{path}/taskInstances")
        states = {t["task_id"]: t["state"] for t in tasks["task_instances"]}
        assert state == "success", (states, log.read_text(errors="replace")[-3000:])
        assert states["restart_stream"] == "success" and states["healthy"] == "skipped", states

        holder = running_holder(settings)
        assert holder is not None, "the supervisor brought the stream back"
        restarted = [a for a in read_alerts(alerts_path(settings)) if a["summary"].startswith("stream restarted")]
        assert [a["source"] for a in restarted] == [f"stream_supervisor/{run_id}"]
        assert restarted[0]["verdict"]["label"] == "DEAD"
    finally:
        airflow.send_signal(signal.SIGINT)
        try:
            airflow.wait(90)
        except subprocess.TimeoutExpired:
            airflow.kill()
            airflow.wait()
        for process in group_members(airflow.pid):
            process.kill()
        stop_stream(settings, drain_timeout=30, term_timeout=10)
        if job.process is not None and job.process.poll() is None:
            job.kill9()
