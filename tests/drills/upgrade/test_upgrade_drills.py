"""What ``upgrade_stream`` must show, on the real stream (spark-submit through the hook), broker and Airflow
(``dag.test()``).

One session stream reads two sites of the demo producer, which keeps producing throughout. Then:

1. an upgrade to release ``v2-tagged`` (a handler with the same state layout and one more column,
   ``release_tag``) succeeds: the column is added to ``session_rows`` by schema evolution, the sessions opened
   before the upgrade continue from their state (no update lands before its snapshot), and new rows carry it;
2. an upgrade to release ``v3-failing`` (its handler raises on every event, so every batch fails) is judged
   FAILED(BUG) by the watch, rolled back by itself: the tables restored with their offsets, the checkpoint copy
   put back, ``v2-tagged`` active again and running;
3. at the end every offset the broker holds is in exactly one table, once, and every open session's table is the
   producer's, cell for cell: nothing was lost or doubled by either run.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.compute as pc  # type: ignore[import-untyped, unused-ignore]
import pytest

from fixtures import REPO, TESTS
from fixtures.stream_process import (
    all_offsets,
    assert_offsets_accounted,
    holder_pid,
    log_ends,
    session_rows_count,
    settings_of,
    stream_env,
    use_stream_env,
)
from fixtures.waiting import wait_for
from streamwarden.alerts import read_alerts
from streamwarden.kafka.admin import create_topics
from streamwarden.local.broker import LocalBroker
from streamwarden.local.producer import ProducerOptions, ProducerReport, run_producer
from streamwarden.runfiles.hold import read_hold
from streamwarden.settings import Settings, load_settings
from streamwarden.tables.location import QUARANTINE, SESSION_ROWS
from streamwarden.testing.replay import final_tables, read_table
from streamwarden.upgrade.release import read_active
from streamwarden.warden.stop import stop_stream
from streamwarden.wire import DEMO_SCHEMA

pytestmark = pytest.mark.slow


WARDEN = {"POKE_INTERVAL": "2s", "STARTUP_GRACE": "150s", "HEARTBEAT_FLOOR": "60s", "DRAIN_TIMEOUT": "60s",
          "TERM_TIMEOUT": "10s", "LEASE_TIMEOUT": "150s", "BROKER_TIMEOUT": "5s"}
RELEASES = {"v2-tagged": "session_handler: fixtures.upgrade_handlers:TaggedReconstruction\n",
            "v3-failing": "session_handler: fixtures.upgrade_handlers:FailingReconstruction\n"}
HEALTH_MINUTES = 0.25


@dataclass
class Drill:
    settings: Settings
    sites: list[str]
    producer: ProducerReport
    runs: dict[str, dict[str, str | None]]
    seconds: dict[str, float]
    active_after: dict[str, str | None]
    pids: dict[str, int | None]
    rows_before_upgrade: int


def _upgrade(conf: dict[str, Any]) -> tuple[dict[str, str | None], float]:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags" / "upgrade_stream.py"))
    assert bag.import_errors == {}
    started = time.monotonic()
    run = bag.dags["upgrade_stream"].test(run_conf=conf)
    return {ti.task_id: ti.state for ti in run.get_task_instances()}, time.monotonic() - started


@pytest.fixture(scope="module")
def drill(broker: LocalBroker, tmp_path_factory: pytest.TempPathFactory, airflow_db: Path) -> Iterator[Drill]:
    import airflow  # noqa: F401 - puts the plugins folder on sys.path

    from streamwarden_airflow.hooks import StreamwardenHook

    base = tmp_path_factory.mktemp("upgrade-drill")
    prefix = f"up{os.getpid()}x{time.monotonic_ns() % 10**6}"
    env = stream_env(base / "home", broker.bootstrap_servers, f"{prefix}-.*", pipeline="sessions",
                     session_buckets="8", trigger_interval="3s")  # the default: 40 msg/s need no 1 s batches
    monkeypatch = pytest.MonkeyPatch()
    use_stream_env(monkeypatch, env, WARDEN)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
    settings = settings_of(env)
    releases = settings.home_paths.releases
    releases.mkdir(parents=True)
    for name, text in RELEASES.items():
        (releases / f"{name}.yaml").write_text(text)
    sites = [f"{prefix}-{i}" for i in range(2)]
    options = ProducerOptions(prefix=prefix, sites=2, partitions=2, sessions_per_site=3, rows_per_snapshot=4,
                              updates_per_session=1_000_000, rate=40.0, seed=7, track_expected=True,
                              honour_restarts=False)
    stop = threading.Event()
    produced: list[ProducerReport] = []
    producer = threading.Thread(target=lambda: produced.append(run_producer(
        load_settings(bootstrap_servers=broker.bootstrap_servers, topic_pattern=f"{prefix}-.*"), options,
        stop=stop)), name="upgrade-drill-producer")
    runs: dict[str, dict[str, str | None]] = {}
    seconds: dict[str, float] = {}
    active_after: dict[str, str | None] = {}
    pids: dict[str, int | None] = {}
    try:
        create_topics({"bootstrap.servers": broker.bootstrap_servers}, sites, 2)
        producer.start()
        pids["initial"] = StreamwardenHook().start_stream()
        wait_for(lambda: session_rows_count(settings) > 50, 240, "the first rows")
        rows_before = session_rows_count(settings)
        for key, conf in (("check", {"release": "v2-tagged", "dry_run": True}),
                          ("v2", {"release": "v2-tagged", "health_minutes": HEALTH_MINUTES, "dry_run": False,
                                  "reason": "drill: add a column"}),
                          ("v3", {"release": "v3-failing", "health_minutes": HEALTH_MINUTES, "dry_run": False,
                                  "reason": "drill: a handler that fails every batch"})):
            runs[key], seconds[key] = _upgrade(conf)
            active = read_active(settings)
            active_after[key] = None if active is None else active.release.name
            pids[key] = holder_pid(settings)
        time.sleep(5)  # the old version processes a few batches again
        stop.set()
        producer.join(60)
        ends = log_ends(all_offsets(broker.bootstrap_servers, sites))
        from streamwarden.testing.replay import caught_up
        wait_for(lambda: caught_up(settings.checkpoint_location, ends), 240, "every offset read")
        outcome = stop_stream(settings, drain_timeout=60, term_timeout=10)
        assert outcome.method.value == "drained", outcome
        yield Drill(settings, sites, produced[0], runs, seconds, active_after, pids, rows_before)
    finally:
        stop.set()
        stop_stream(settings, drain_timeout=10, term_timeout=10)
        monkeypatch.undo()


def _alerts(settings: Settings, status: str) -> list[dict[str, Any]]:
    return [a for a in read_alerts(settings.run_paths.alerts) if a["verdict"].get("label", "").startswith(status)]


def test_a_dry_run_checks_and_changes_nothing(drill: Drill) -> None:
    states = drill.runs["check"]
    assert states["check_params"] == states["check_compatibility"] == states["report_and_alert"] == "success"
    assert {states[t] for t in ("hold_and_drain", "copy_checkpoint", "start_new", "watch_health", "rollback")} == \
        {"skipped"}
    assert drill.active_after["check"] is None and drill.pids["check"] == drill.pids["initial"]
    [alert] = _alerts(drill.settings, "UPGRADE_CHECKED")
    assert alert["severity"] == "info" and "dry_run=false" in alert["next_action"]


def test_an_upgrade_that_adds_a_column_succeeds_and_keeps_state(drill: Drill) -> None:
    states = drill.runs["v2"]
    assert all(states[t] == "success" for t in ("hold_and_drain", "copy_checkpoint", "evolve_schema",
                                                "activate_release", "start_new", "watch_health",
                                                "report_and_alert")), states
    assert states["rollback"] == "skipped"
    assert drill.active_after["v2"] == "v2-tagged" and drill.pids["v2"] not in (None, drill.pids["initial"])
    [alert] = _alerts(drill.settings, "UPGRADE_UPGRADED")
    assert alert["severity"] == "info" and alert["failure_class"] is None
    assert any("release_tag" in line for line in alert["failure"]["evidence"])
    rows = read_table(drill.settings.root("output") / SESSION_ROWS)
    tagged = rows.filter(pc.equal(rows["release_tag"], "v2"))
    assert 0 < tagged.num_rows < rows.num_rows  # rows before the upgrade read the new column as null
    # state kept: the sessions open before the upgrade go on with updates, none before its snapshot
    old_sessions = set(rows.filter(pc.is_null(rows["release_tag"]))["session_id"].to_pylist())
    assert old_sessions & set(tagged.filter(pc.equal(tagged["op"], "upsert"))["session_id"].to_pylist())


def test_a_release_whose_handler_fails_every_batch_rolls_back_by_itself(drill: Drill) -> None:
    states = drill.runs["v3"]
    assert states["watch_health"] == "failed" and states["rollback"] == "success", states
    assert states["report_and_alert"] == "failed"
    assert drill.active_after["v3"] == "v2-tagged"  # the previous release again
    assert drill.pids["v3"] is not None and drill.pids["v3"] != drill.pids["v2"]
    assert read_hold(drill.settings) is None
    [alert] = _alerts(drill.settings, "UPGRADE_ROLLED_BACK")
    assert alert["failure_class"] == "BUG" and alert["severity"] == "warning"
    evidence = "\n".join(alert["failure"]["evidence"])
    assert "watch_health failed (BUG)" in evidence and "release v3 cannot apply" in evidence
    assert "checkpoint: the new version's moved to" in evidence and "v2-tagged" in evidence
    assert "Fix the release" in alert["next_action"]
    archive = drill.settings.root("checkpoint") / "archive"
    assert len([p for p in archive.iterdir() if "-rolledback-" in p.name]) == 1


def test_nothing_is_lost_or_doubled_and_every_session_is_exact(drill: Drill) -> None:
    output = drill.settings.root("output")
    assert_offsets_accounted(output, all_offsets(drill.settings.bootstrap_servers, drill.sites))
    dead = read_table(output / QUARANTINE)
    assert dead.num_rows == 0, dead.to_pylist()[:5]  # no update before its snapshot, no gap: state kept
    rows = read_table(output / SESSION_ROWS)
    expected = drill.producer.expected_tables
    assert expected is not None
    assert {s: t for s, t in final_tables(rows, DEMO_SCHEMA).items() if s in expected} == expected
    print(f"upgrade drill durations (s): {drill.seconds}")
