"""End to end with the real scheduler and API server: ``airflow standalone`` on a loopback port runs the
supervisor DAG triggered through the REST API, and it brings a stopped stream back."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from airflow_server import AirflowServer
from streamwarden.local.broker import LocalBroker
from streamwarden.warden.alerts import alerts_path, read_alerts
from streamwarden.warden.launcher import running_holder
from streamwarden.warden.stop import stop_stream
from support import StreamProcess, produce_raw, stream_env

pytestmark = pytest.mark.slow


def test_supervisor_triggered_through_rest_brings_a_stopped_stream_back(
        broker: LocalBroker, topic_factory: Callable[..., list[str]], tmp_path: Path) -> None:
    topics = topic_factory(1, partitions=2)
    produce_raw(broker.bootstrap_servers, topics, 2_000)
    env = stream_env(tmp_path / "home", broker.bootstrap_servers, f"{topics[0].rsplit('-', 1)[0]}-.*")
    job = StreamProcess(env, tmp_path / "stream.log").start()
    settings = job.settings

    try:
        with AirflowServer(tmp_path / "airflow", env) as airflow:
            # The stream runs, then is stopped (drained) while Airflow comes up.
            job.wait_until(settings.heartbeat_path.exists, 240, "the first heartbeat")
            assert job.stop() == 0, job.log_tail()
            assert running_holder(settings) is None

            api = airflow.ready("stream_supervisor")
            assert api.import_errors() == []

            run_id = airflow.trigger("stream_supervisor", {"reason": "e2e: bring it back"})
            state = airflow.wait_run("stream_supervisor", run_id, 300)["state"]
            states = airflow.task_states("stream_supervisor", run_id)
            assert state == "success", (states, airflow.log_tail())
            assert states["restart_stream"] == "success" and states["healthy"] == "skipped", states

            holder = running_holder(settings)
            assert holder is not None, "the supervisor brought the stream back"
            restarted = [a for a in read_alerts(alerts_path(settings))
                         if a["summary"].startswith("stream restarted")]
            assert [a["source"] for a in restarted] == [f"stream_supervisor/{run_id}"]
            assert restarted[0]["verdict"]["label"] == "DEAD"
    finally:
        stop_stream(settings, drain_timeout=30, term_timeout=10)
        if job.process is not None and job.process.poll() is None:
            job.kill9()
