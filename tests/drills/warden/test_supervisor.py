"""The warden end to end with real Spark, a real broker and real Airflow (``dag.test()`` of the supervisor).

The supervisor's tasks run in this process with the ``STREAMWARDEN_*`` settings set here; the stream is the
real job, launched detached through spark-submit (Spark provider, ``spark_default`` connection).
"""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fixtures import REPO
from fixtures.stream_process import StreamProcess, expected_ranges, produce_raw, stream_env
from fixtures.waiting import wait_for
from fixtures.webhook import Receiver
from streamwarden.alerts import read_alerts
from streamwarden.failures import EXIT_ALREADY_RUNNING, EXIT_CODES, FailureClass
from streamwarden.local.broker import LocalBroker
from streamwarden.processes import live
from streamwarden.runfiles.checkpoint import committed_offsets
from streamwarden.runfiles.heartbeat import read_heartbeat
from streamwarden.settings import Settings, load_settings
from streamwarden.testing.exactly_once import verify_table
from streamwarden.warden.launcher import StreamAlreadyRunningError, running_holder
from streamwarden.warden.limits import progress_limit
from streamwarden.warden.restart_policy import load_history
from streamwarden.warden.settings import load_warden_settings
from streamwarden.warden.stop import stop_stream

pytestmark = pytest.mark.slow

HEARTBEAT_FLOOR = 25.0
WARDEN_ENV = {"HEARTBEAT_FLOOR": f"{HEARTBEAT_FLOOR:g}s", "STARTUP_GRACE": "150s", "BACKOFF_BASE": "1s",
              "BACKOFF_MAX": "2s", "POKE_INTERVAL": "1s", "DRAIN_TIMEOUT": "30s", "TERM_TIMEOUT": "10s",
              "MAX_RESTARTS_PER_HOUR": "10", "LAG_WINDOW": "3", "LEASE_TIMEOUT": "150s"}


@pytest.fixture()
def warden_env(tmp_path: Path, broker: LocalBroker, topic_factory: Callable[..., list[str]],
               monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[dict[str, str], list[str]]]:
    """Settings for the supervisor's tasks (this process) and the stream; stops the stream afterwards."""
    topics = topic_factory(2, partitions=2)
    env = stream_env(tmp_path / "home", broker.bootstrap_servers, f"{topics[0].rsplit('-', 1)[0]}-.*")
    for name, value in env.items():
        if name.startswith("STREAMWARDEN_"):
            monkeypatch.setenv(name, value)
    for name, value in WARDEN_ENV.items():
        monkeypatch.setenv(f"STREAMWARDEN_WARDEN_{name}", value)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    yield env, topics
    stop_stream(load_settings(), drain_timeout=5, term_timeout=10)


def _supervise(conf: dict[str, Any] | None = None) -> dict[str, str | None]:
    """One ``dag.test()`` of the supervisor parsed now (thresholds come from the environment)."""
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=str(REPO / "dags" / "stream_supervisor.py")).dags["stream_supervisor"]
    run = dag.test(run_conf=conf)
    return {ti.task_id: ti.state for ti in run.get_task_instances()}


def _stale(settings: Settings) -> bool:
    """The heartbeat is older than the progress limit (the floor, or 3 x the p99 batch when batches were slow)."""
    beat = read_heartbeat(settings.run_paths.heartbeat) or pytest.fail("no heartbeat")
    limit = progress_limit(beat, settings.trigger_interval, load_warden_settings())
    return beat.age_seconds() > limit.seconds + 1


def _holder_pid(settings: Settings) -> int:
    holder = running_holder(settings)
    assert holder is not None, "the stream should be running"
    return holder.pid


def _caught_up(settings: Settings, ends: dict[str, dict[int, int]]) -> Callable[[], bool]:
    def done() -> bool:
        committed = committed_offsets(settings.checkpoint_location) or {}
        return all(committed.get(t, {}).get(str(p), -1) >= end for t, parts in ends.items()
                   for p, end in parts.items())
    return done


def _merge(total: dict[str, dict[int, int]], more: dict[str, dict[int, int]]) -> None:
    for topic, parts in more.items():
        for partition, end in parts.items():
            total.setdefault(topic, {})[partition] = max(end, total.get(topic, {}).get(partition, 0))


@pytest.mark.usefixtures("airflow_db")
def test_the_warden_keeps_one_stream_alive(warden_env: tuple[dict[str, str], list[str]], broker: LocalBroker,
                                           tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import airflow  # noqa: F401 - puts the plugins folder on sys.path

    from streamwarden_airflow.hooks import StreamwardenHook

    env, topics = warden_env
    settings = load_settings()
    table = settings.root("output") / "records"
    ends = produce_raw(broker.bootstrap_servers, topics, 20_000)

    # Two restarts racing (as two supervisors would without the pool), and an operator's manual start:
    # one job.
    outcomes: list[int | BaseException] = []

    def start() -> None:
        try:
            outcomes.append(StreamwardenHook().start_stream())
        except StreamAlreadyRunningError as exc:
            outcomes.append(exc)

    racers = [threading.Thread(target=start) for _ in range(2)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(200)
    pids = [o for o in outcomes if isinstance(o, int)]
    assert len(pids) == 1 and sum(isinstance(o, StreamAlreadyRunningError) for o in outcomes) == 1, outcomes
    manual = StreamProcess(env, tmp_path / "manual.log").start()
    assert manual.wait_exit(120) == EXIT_ALREADY_RUNNING
    first = _holder_pid(settings)
    assert first == pids[0]

    # Running and caught up: healthy, no action.
    wait_for(_caught_up(settings, ends), 240, "the first records", interval=0.5)
    states = _supervise()
    assert states["healthy"] == "success" and states["restart_stream"] == "skipped", states
    assert _holder_pid(settings) == first

    # kill -9 the driver: the next run restarts it; output continues exactly once.
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: running_holder(settings) is None, 60, "the lease to be released", interval=0.5)
    _merge(ends, produce_raw(broker.bootstrap_servers, topics, 10_000))
    states = _supervise()
    assert states["restart_stream"] == "success" and states["escalate"] == "skipped", states
    second = _holder_pid(settings)
    assert second != first
    wait_for(_caught_up(settings, ends), 240, "records after the restart", interval=0.5)
    report = verify_table(table, expected_ranges(ends))
    assert report.ok, report.summary()
    restart_alerts = [a for a in read_alerts(settings.run_paths.alerts) if a["summary"].startswith("stream restarted")]
    assert restart_alerts[-1]["verdict"]["label"] == "DEAD"

    # SIGSTOP the driver: hung, seen through the heartbeat's age; the stopped process is killed.
    os.kill(second, signal.SIGSTOP)
    wait_for(lambda: _stale(settings), 180, "a stale heartbeat", interval=0.5)
    _merge(ends, produce_raw(broker.bootstrap_servers, topics, 5_000))
    states = _supervise()
    assert states["restart_stream"] == "success", states
    assert not live([second]), "the stopped driver was killed"
    third = _holder_pid(settings)
    hung = read_alerts(settings.run_paths.alerts)[-1]
    assert hung["verdict"]["label"] == "HUNG" and hung["verdict"]["process_state"] == "stopped", hung
    assert any("heartbeat is" in r for r in hung["verdict"]["reasons"]), hung["verdict"]["reasons"]
    wait_for(_caught_up(settings, ends), 240, "records after the hung restart", interval=0.5)
    report = verify_table(table, expected_ranges(ends))
    assert report.ok, report.summary()

    # The circuit breaker: as many starts as allowed were made; the next death is not restarted.
    starts = len(load_history(settings).starts)
    assert starts == 2
    monkeypatch.setenv("STREAMWARDEN_WARDEN_MAX_RESTARTS_PER_HOUR", str(starts))
    os.kill(third, signal.SIGKILL)
    wait_for(lambda: running_holder(settings) is None, 60, "the lease to be released", interval=0.5)
    states = _supervise()
    assert states["escalate"] == "failed" and states["restart_stream"] == "skipped", states
    assert running_holder(settings) is None and len(load_history(settings).starts) == starts
    breaker = read_alerts(settings.run_paths.alerts)[-1]
    assert breaker["severity"] == "critical" and "circuit breaker open" in breaker["summary"], breaker
    assert "force_restart" in breaker["next_action"]

    # An operator forces a restart: it overrides the breaker.
    states = _supervise({"force_restart": True, "reason": "fixed the cause"})
    assert states["restart_stream"] == "success", states
    assert running_holder(settings) is not None


@pytest.mark.usefixtures("airflow_db")
def test_an_integrity_failure_is_not_restarted_but_alerted(
        warden_env: tuple[dict[str, str], list[str]], broker: LocalBroker, tmp_path: Path,
        receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    env, topics = warden_env
    monkeypatch.setenv("STREAMWARDEN_WARDEN_WEBHOOK_URL", f"http://127.0.0.1:{receiver.server_port}/alerts")
    settings = load_settings()
    produce_raw(broker.bootstrap_servers, topics, 2_000)
    job = StreamProcess(env, tmp_path / "stream.log").start(STREAMWARDEN_CHAOS_RAISE_AT="before_commit:INTEGRITY")
    assert job.wait_exit(240) == EXIT_CODES[FailureClass.INTEGRITY], job.log_tail()

    states = _supervise()
    assert states["escalate"] == "failed" and states["restart_stream"] == "skipped", states
    assert running_holder(settings) is None and load_history(settings).starts == []
    [alert] = read_alerts(settings.run_paths.alerts)
    assert alert["failure_class"] == "INTEGRITY" and alert["verdict"]["label"] == "FAILED(INTEGRITY)"
    assert alert["failure"]["message"].startswith("chaos: injected INTEGRITY")
    assert "STREAMWARDEN_ON_GAP=resync" in alert["next_action"] and alert["deliveries"]["webhook"] == "sent"
    assert [a["failure_class"] for a in receiver.received] == ["INTEGRITY"]

    # The next run fails again (still red) but does not page twice for the same failure.
    states = _supervise()
    assert states["escalate"] == "failed" and len(read_alerts(settings.run_paths.alerts)) == 1
    assert len(receiver.received) == 1
