"""``recover_stream`` as Airflow parses and runs it: its shape and documentation, bad Params refused before
anything changes; and the drill on the real stream (spark-submit through the hook), broker and Airflow
(``dag.test()``, the approval answered through Airflow's API as a person would):

1. a dry run plans and changes nothing; a rejected run changes nothing;
2. an approved run to the last validated versions stops the stream, archives its checkpoint, restores both
   tables with their offsets, seeds a new checkpoint at the sessions' clean starts, starts the stream,
   waits until it caught up and validates: it passes;
3. at the end every offset the broker holds is in exactly one table, once; nothing went to quarantine (the
   new checkpoint rebuilt every open session's state); every open session's table is the producer's, cell
   for cell.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fixtures import REPO
from fixtures.approvals import Approval, answer_in_process
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
from streamwarden.tables.location import QUARANTINE, SESSION_ROWS, TableLocation
from streamwarden.testing.replay import caught_up, final_tables, read_table
from streamwarden.validation import steps as validation_steps
from streamwarden.validation.report import last_validated
from streamwarden.validation.settings import load_validation_settings
from streamwarden.warden.stop import LIFECYCLE_POOL, stop_stream
from streamwarden.wire import DEMO_SCHEMA

STEPS = ("check_params", "plan_recovery", "stop_if_dry_run", "approve", "hold_and_stop", "archive_checkpoint",
         "restore_tables", "seed_checkpoint", "start_stream", "wait_caught_up", "validate", "report_and_alert")
ACTING = STEPS[4:11]
WARDEN = {"POKE_INTERVAL": "2s", "STARTUP_GRACE": "150s", "HEARTBEAT_FLOOR": "60s", "DRAIN_TIMEOUT": "60s",
          "TERM_TIMEOUT": "10s", "LEASE_TIMEOUT": "150s", "BROKER_TIMEOUT": "5s"}


def _dag() -> Any:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags" / "recover_stream.py"))
    assert bag.import_errors == {}
    return bag.dags["recover_stream"]


def test_shape_params_and_documentation() -> None:
    dag = _dag()
    assert dag.max_active_runs == 1 and dag.schedule is None
    assert [t.task_id for t in sorted(dag.tasks, key=lambda t: len(t.get_flat_relatives(upstream=True)))] == \
        list(STEPS)
    assert set(dag.params.keys()) == {"target", "versions", "as_of", "offsets", "dry_run", "reason"}
    assert dag.params["dry_run"] is True and dag.params["target"] == "last_validated"
    assert dag.get_task("report_and_alert").trigger_rule == "all_done"
    assert dag.get_task("hold_and_stop").pool == dag.get_task("start_stream").pool == LIFECYCLE_POOL
    assert dag.get_task("wait_caught_up").mode == "reschedule"
    assert dag.get_task("approve").defaults == ["Reject"]
    for words in (*STEPS, "last_validated", "versions", "as_of", "offsets", "dry_run", "reason", "CONFIG",
                  "recoveries.jsonl", "archive", "release-hold", "clear the failed task", "lost for good"):
        assert words in dag.doc_md, words


@pytest.mark.usefixtures("airflow_db")
def test_bad_params_are_named_and_refused_before_anything_changes(
        broker: LocalBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = stream_env(tmp_path / "home", broker.bootstrap_servers, "bad-params-.*", pipeline="sessions")
    use_stream_env(monkeypatch, env)
    settings = settings_of(env)
    run = _dag().test(run_conf={"target": "offsets", "offsets": {"elsewhere": {"0": 5}, "bad-params-1": {"0": -3}},
                                "dry_run": False})
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states["check_params"] == "failed" and states["report_and_alert"] == "failed"
    assert all(states.get(t) in ("upstream_failed", None) for t in STEPS[1:11]), states
    [alert] = read_alerts(settings.run_paths.alerts)
    message = alert["failure"]["message"]
    assert alert["failure_class"] == "CONFIG" and "'elsewhere' is not a topic of this stream" in message
    assert "bad-params-1[0] must be an offset (0 or more), got -3" in message
    run = _dag().test(run_conf={"target": "versions", "versions": {"session_rows": 7, "quarantine": 3}})
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states["check_params"] == "success" and states["plan_recovery"] == "failed"
    failure = read_alerts(settings.run_paths.alerts)[-1]["failure"]
    assert failure["failure_class"] == "CONFIG" and "session_rows" in failure["message"], failure
    assert read_hold(settings) is None and not (settings.run_paths.recoveries_log).exists()
    assert not (settings.root("checkpoint") / "archive").exists()


@dataclass
class Drill:
    settings: Settings
    sites: list[str]
    producer: ProducerReport
    runs: dict[str, dict[str, str | None]]
    reports: dict[str, dict[str, Any]]
    approvals: dict[str, Approval]
    pids: dict[str, int | None]
    validated: dict[str, int]
    newest_before: dict[str, int]


def _recover(conf: dict[str, Any], answer: str | None) -> tuple[dict[str, str | None], dict[str, Any], Approval]:
    approval = Approval("recover_stream", "approve", answer or "")
    if answer is None:
        run = _dag().test(run_conf=conf)
    else:
        with answer_in_process("recover_stream", "approve", answer) as approval:
            run = _dag().test(run_conf=conf)
    [report] = [ti for ti in run.get_task_instances() if ti.task_id == "report_and_alert"]
    return ({ti.task_id: ti.state for ti in run.get_task_instances()},
            report.xcom_pull(task_ids="report_and_alert") or {}, approval)


@pytest.fixture(scope="module")
def drill(broker: LocalBroker, tmp_path_factory: pytest.TempPathFactory, airflow_db: Path) -> Iterator[Drill]:
    import airflow  # noqa: F401 - puts the plugins folder on sys.path

    from streamwarden_airflow.hooks import StreamwardenHook

    base = tmp_path_factory.mktemp("recover-drill")
    prefix = f"rc{os.getpid()}x{time.monotonic_ns() % 10**6}"
    env = stream_env(base / "home", broker.bootstrap_servers, f"{prefix}-.*", pipeline="sessions",
                     session_buckets="8", trigger_interval="3s")  # the default: 40 msg/s need no 1 s batches
    monkeypatch = pytest.MonkeyPatch()
    use_stream_env(monkeypatch, env, WARDEN)
    settings = settings_of(env)
    sites = [f"{prefix}-{i}" for i in range(2)]
    options = ProducerOptions(prefix=prefix, sites=2, partitions=2, sessions_per_site=3, rows_per_snapshot=4,
                              updates_per_session=1_000_000, rate=40.0, seed=5, track_expected=True,
                              honour_restarts=False)
    stop = threading.Event()
    produced: list[ProducerReport] = []
    producer = threading.Thread(target=lambda: produced.append(run_producer(
        load_settings(bootstrap_servers=broker.bootstrap_servers, topic_pattern=f"{prefix}-.*"), options,
        stop=stop)), name="recover-drill-producer")
    runs: dict[str, dict[str, str | None]] = {}
    reports: dict[str, dict[str, Any]] = {}
    approvals: dict[str, Approval] = {}
    pids: dict[str, int | None] = {}
    try:
        create_topics({"bootstrap.servers": broker.bootstrap_servers}, sites, 2)
        producer.start()
        pids["initial"] = StreamwardenHook().start_stream()
        wait_for(lambda: session_rows_count(settings) > 50, 240, "the first rows")
        recorded = validation_steps.run(settings, load_validation_settings())
        assert recorded.report.passed, recorded.report.text()
        validated = {name: int(entry["version"])
                     for name, entry in (last_validated(settings.run_paths.validation) or {})["tables"]
                     .items()}
        rows_then = session_rows_count(settings)
        wait_for(lambda: session_rows_count(settings) > rows_then + 60, 240, "rows after the validated versions")
        for key, conf, answer in (("dry", {"reason": "drill: look"}, None),
                                  ("rejected", {"dry_run": False, "reason": "drill: no"}, "Reject"),
                                  ("approved", {"dry_run": False, "reason": "drill: roll back"}, "Approve")):
            if key == "approved":
                newest_before = {name: TableLocation.of(settings, name).open().version() for name in validated}
            runs[key], reports[key], approvals[key] = _recover(conf, answer)
            pids[key] = holder_pid(settings)
        time.sleep(5)  # the recovered stream goes on with new records
        stop.set()
        producer.join(60)
        ends = log_ends(all_offsets(broker.bootstrap_servers, sites))
        wait_for(lambda: caught_up(settings.checkpoint_location, ends), 240, "every offset read")
        assert stop_stream(settings, drain_timeout=60, term_timeout=10).method.value == "drained"
        yield Drill(settings, sites, produced[0], runs, reports, approvals, pids, validated, newest_before)
    finally:
        stop.set()
        stop_stream(settings, drain_timeout=10, term_timeout=10)
        monkeypatch.undo()


@pytest.mark.slow
def test_a_dry_run_and_a_rejected_run_change_nothing(drill: Drill) -> None:
    dry, rejected = drill.runs["dry"], drill.runs["rejected"]
    assert dry["plan_recovery"] == dry["report_and_alert"] == "success", dry
    assert {dry[t] for t in ("approve", *ACTING)} == {"skipped"}
    assert drill.reports["dry"]["outcome"] == "dry run: nothing changed"
    assert rejected["approve"] == rejected["report_and_alert"] == "success", rejected
    assert {rejected[t] for t in ACTING} == {"skipped"}
    assert drill.reports["rejected"]["outcome"].startswith("not approved: rejected by admin at ")  # not "no answer"
    assert drill.pids["dry"] == drill.pids["rejected"] == drill.pids["initial"], "the stream ran on untouched"
    assert "| table | newest | restore to |" in (drill.approvals["rejected"].body or "")


@pytest.mark.slow
def test_an_approved_recovery_restores_replays_and_validates(drill: Drill) -> None:
    states = drill.runs["approved"]
    assert all(states[t] == "success" for t in STEPS), states
    report = drill.reports["approved"]
    assert report["outcome"] == "recovered and validated", report
    approval = drill.approvals["approved"]
    assert approval.answered and report["recovery_id"] in (approval.subject or "")
    assert "| topic | partition | resume at |" in (approval.body or "")
    restored = {r["table"]: r for r in report["restored"]}
    assert {name: r["target"] for name, r in restored.items()} == drill.validated
    for name, r in restored.items():
        assert r["version"] > drill.newest_before[name] and r["undone"], r  # something was undone, then replayed
    assert drill.pids["approved"] not in (None, drill.pids["initial"]) and read_hold(drill.settings) is None
    archive = drill.settings.root("checkpoint") / "archive"
    [archived] = list(archive.iterdir())
    assert (archived / drill.settings.query_name / "commits").is_dir()
    [entry] = [json.loads(line) for line in (drill.settings.run_paths.recoveries_log).read_text().splitlines()]
    assert entry["recovery_id"] == report["recovery_id"] and entry["lost"] == 0
    assert report["validation"]["passed"] is True


@pytest.mark.slow
def test_nothing_is_lost_or_doubled_and_every_session_is_exact(drill: Drill) -> None:
    output = drill.settings.root("output")
    assert_offsets_accounted(output, all_offsets(drill.settings.bootstrap_servers, drill.sites))
    dead = read_table(output / QUARANTINE)
    assert dead.num_rows == 0, dead.to_pylist()[:5]  # the new checkpoint rebuilt every open session's state
    expected = drill.producer.expected_tables
    assert expected is not None
    assert {s: t for s, t in final_tables(read_table(output / SESSION_ROWS), DEMO_SCHEMA).items()
            if s in expected} == expected
