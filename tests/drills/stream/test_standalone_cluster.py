"""The session job on a real Spark standalone cluster (master + worker on loopback), launched as the
warden launches it (detached ``spark-submit --master spark://...``), stopped by drain."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fixtures.sessions import SCHEMA
from fixtures.stream_process import all_offsets, assert_offsets_accounted, log_ends
from streamwarden.local.broker import LocalBroker, free_port
from streamwarden.local.producer import ProducerOptions, run_producer
from streamwarden.settings import load_settings
from streamwarden.tables.location import SESSION_ROWS
from streamwarden.testing.replay import caught_up, final_tables, read_table
from streamwarden.warden.launcher import log_tail, start_stream_detached
from streamwarden.warden.stop import StopMethod, stop_stream

pytestmark = pytest.mark.slow
SPARK_CLASS = Path(sys.executable).parent / "spark-class"


def _daemon(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen([str(SPARK_CLASS), *args], env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def _wait_for_line(log: Path, text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and text in log.read_text(errors="replace"):
            return
        time.sleep(0.5)
    raise AssertionError(f"{text!r} not in {log} within {timeout:.0f}s:\n{log_tail(log)}")


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A Spark master and one worker (2 cores) on loopback; yields the master URL and the worker's work dir."""
    home = tmp_path_factory.mktemp("standalone")
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(home / "logs"),
           "SPARK_LOCAL_DIRS": str(home / "local"), "PYSPARK_PYTHON": sys.executable}
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    master = _daemon(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                      "--webui-port", str(free_port())], env, home / "master.log")
    daemons = [master]
    try:
        _wait_for_line(home / "master.log", "I have been elected leader", 120)
        daemons.append(_daemon(["org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1", "--cores", "2",
                                "--memory", "3g", "--webui-port", str(free_port()), "--work-dir",
                                str(home / "work")], env, home / "worker.log"))
        _wait_for_line(home / "worker.log", "Successfully registered with master", 120)
        yield url, home / "work"
    finally:
        for daemon in reversed(daemons):
            os.killpg(daemon.pid, signal.SIGTERM)
            try:
                daemon.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(daemon.pid, signal.SIGKILL)
                daemon.wait(10)


def test_sessions_rebuild_exactly_once_on_a_standalone_cluster(
    broker: LocalBroker, standalone: tuple[str, Path], tmp_path: Path
) -> None:
    master, worker_dir = standalone
    options = ProducerOptions(prefix=f"cluster{os.getpid()}", sites=2, partitions=2, sessions_per_site=10,
                              rows_per_snapshot=8, updates_per_session=400, max_messages=30_000,
                              track_expected=True, seed=3)
    report = run_producer(load_settings(bootstrap_servers=broker.bootstrap_servers), options)
    assert report.expected_tables is not None and not report.delivery_errors
    expected_offsets = all_offsets(broker.bootstrap_servers, list(report.topics))
    ends = log_ends(expected_offsets)

    settings = load_settings(home=tmp_path, bootstrap_servers=broker.bootstrap_servers,
                             topic_pattern=f"{options.prefix}-.*", pipeline="sessions", spark_master=master,
                             trigger_interval=1.0, shuffle_partitions=2, max_offsets_per_trigger=10_000)
    start_stream_detached(settings, tmp_path / "stream.log")
    try:
        deadline = time.monotonic() + 600
        while not caught_up(settings.checkpoint_location, ends):
            assert time.monotonic() < deadline, log_tail(tmp_path / "stream.log", 60)
            time.sleep(1)
    finally:
        outcome = stop_stream(settings)
    assert outcome.method is StopMethod.DRAINED, log_tail(tmp_path / "stream.log", 60)

    output = settings.root("output")
    assert_offsets_accounted(output, expected_offsets)
    assert final_tables(read_table(output / SESSION_ROWS), SCHEMA) == report.expected_tables
    executor_logs = [p.read_text(errors="replace") for p in worker_dir.glob("app-*/*/stderr")]
    assert executor_logs, "no executor ran on the standalone worker"
    assert any("TransformWithStateInPandas" in log or "Running task" in log for log in executor_logs), \
        "the executor ran no task"
