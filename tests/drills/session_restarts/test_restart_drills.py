"""What ``restart_sessions`` must show (issue 15), on the real stream, broker and Airflow.

One drill: a real session stream (``STREAMWARDEN_ON_GAP=resync``) reads three sites of the demo producer,
which honours the control topic except for the third site, told to ignore it. A gap is injected into a
session of the first site: its records go to quarantine. Then a ``restart_sessions`` run (``dag.test()``,
a 1-minute schedule, a few seconds of jitter) asks every site for new sessions: the first two answer, their
new sessions are clean and their tables exact, the data lost is reported and ends within seconds of the
site's turn (a schedule brings the turn within one restart interval of the gap); the third is alerted after its
deadline, and no other is. ``validate_output`` then reports every site's exposure and finds only the third over
the limit.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow.compute as pc  # type: ignore[import-untyped, unused-ignore]
import pytest

from fixtures import REPO
from fixtures.stream_process import (
    StreamProcess,
    all_offsets,
    assert_offsets_accounted,
    log_ends,
    settings_of,
    stream_env,
)
from streamwarden.alerts import read_alerts
from streamwarden.kafka.admin import create_topics
from streamwarden.local.broker import LocalBroker
from streamwarden.local.producer import ProducerOptions, ProducerReport, run_producer
from streamwarden.settings import Settings, load_settings
from streamwarden.tables.location import QUARANTINE, SESSION_ROWS
from streamwarden.testing.replay import final_tables, read_table
from streamwarden.wire import DEMO_SCHEMA

pytestmark = pytest.mark.slow


INTERVAL = 60.0  # STREAMWARDEN_SESSION_RESTART_SCHEDULE=1m
REACTION_S = 15.0
"""How long a site may take, from its turn (the plan's ``not_before``) to its new session's first record, on a busy
machine: the producer polls the control topic between its sends."""
ANSWER_SENT_S = 1.0
"""Bound on the time between an answer's event time and the broker time of the end it sends first (a busy host
hands the end to the client milliseconds later)."""
RATE = 90.0  # messages/s over the three sites
RESTART = {"session_restart_schedule": "1m", "session_restart_jitter": "3s", "session_restart_deadline": "30s",
           "session_restart_poke_interval": "2s"}


@dataclass
class Drill:
    """The stream, the producer's report, the restart run's task states, report and alerts, and validation's."""

    settings: Settings
    sites: list[str]
    producer: ProducerReport
    states: dict[str, str | None]
    report: dict[str, Any]
    alerts: list[dict[str, Any]]
    validation: dict[str, Any]
    validation_states: dict[str, str | None]


def _integrity_letters(output: Path, site: str) -> int:
    dead = read_table(output / QUARANTINE)
    if dead.num_rows == 0:
        return 0
    return int(pc.sum(pc.and_(pc.equal(dead["topic"], site), pc.equal(dead["error_class"], "SEQUENCE_GAP"))
                      ).as_py() or 0)


def _run_dag(dag_id: str, env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
             conf: dict[str, Any] | None = None) -> Any:
    from airflow.dag_processing.dagbag import DagBag

    for name in [n for n in os.environ if n.startswith("STREAMWARDEN_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        if name.startswith("STREAMWARDEN_"):
            monkeypatch.setenv(name, value)
    bag = DagBag(dag_folder=str(REPO / "dags" / f"{dag_id}.py"))
    assert bag.import_errors == {}
    return bag.dags[dag_id].test(run_conf=conf)


@pytest.fixture(scope="module")
def drill(broker: LocalBroker, tmp_path_factory: pytest.TempPathFactory, airflow_db: Path) -> Iterator[Drill]:
    base = tmp_path_factory.mktemp("restart-drill")
    prefix = f"rs{os.getpid()}x{time.monotonic_ns() % 10**6}"
    control = f"control-{prefix}"
    env = stream_env(base / "home", broker.bootstrap_servers, f"{prefix}-.*", pipeline="sessions",
                     on_gap="resync", session_buckets="8", control_topic=control, trigger_interval="2s", **RESTART)
    settings = settings_of(env)
    sites = [f"{prefix}-{i}" for i in range(3)]
    options = ProducerOptions(prefix=prefix, sites=3, partitions=2, sessions_per_site=3, rows_per_snapshot=5,
                              updates_per_session=1_000_000, rate=RATE, seed=11, track_expected=True,
                              ignore_restarts=(sites[2],), inject_gap=(0, 600))
    stop = threading.Event()
    produced: list[ProducerReport] = []
    producer = threading.Thread(target=lambda: produced.append(run_producer(
        load_settings(bootstrap_servers=broker.bootstrap_servers, topic_pattern=f"{prefix}-.*",
                      control_topic=control), options, stop=stop)), name="drill-producer")
    job = StreamProcess(env, base / "stream.log")
    monkeypatch = pytest.MonkeyPatch()
    try:  # the stream runs first, so the gap is seen within seconds and the restart follows at once
        create_topics({"bootstrap.servers": broker.bootstrap_servers}, sites, 2)
        job.start()
        job.wait_until(job.query_started, 300, "the stream's query")
        producing_since = time.time()
        producer.start()
        output = settings.root("output")
        job.wait_until(lambda: _integrity_letters(output, sites[0]) > 0, 300, "the gap of the first site quarantined")
        run = _run_dag("restart_sessions", env, monkeypatch)
        states = {ti.task_id: ti.state for ti in run.get_task_instances()}
        [report_file] = sorted(settings.run_paths.session_restarts.glob("*.json"))
        report: dict[str, Any] = json.loads(report_file.read_text())
        alerts = read_alerts(settings.run_paths.alerts)
        # validate_output once the ignoring site's oldest session is past 1.5 intervals (the others restarted)
        time.sleep(max(0.0, producing_since + 1.5 * INTERVAL + 5 - time.time()))
        checked = _run_dag("validate_output", env, monkeypatch, {"checks": ["coverage", "exposure"]})
        validation_states = {ti.task_id: ti.state for ti in checked.get_task_instances()}
        [validated] = [ti for ti in checked.get_task_instances() if ti.task_id == "validate_tables"]
        validation: dict[str, Any] = json.loads(Path(validated.xcom_pull(task_ids="validate_tables")["report"])
                                                .read_text())
        stop.set()
        producer.join(60)
        ends = log_ends(all_offsets(broker.bootstrap_servers, sites))
        job.wait_until(lambda: job.caught_up(ends) and job.checkpoint_settled(), 300, "every offset read")
        assert job.stop() == 0, job.log_tail()
        yield Drill(settings, sites, produced[0], states, report, alerts, validation, validation_states)
    finally:
        stop.set()
        monkeypatch.undo()
        if job.process is not None and job.process.poll() is None:
            job.kill9()


def test_the_answering_sites_restart_and_only_the_ignoring_one_is_alerted(drill: Drill) -> None:
    answering, ignoring = drill.sites[:2], drill.sites[2]
    assert drill.states == {"check_params": "success", "plan_restarts": "success", "send_commands": "success",
                            "wait_for_new_sessions": "success", "report_and_alert": "failed"}
    plan = {t["site"]: t["request_id"] for t in drill.report["plan"]["turns"]}
    assert set(plan) == set(drill.sites)
    assert {a["site"] for a in drill.report["answers"].values()} == set(answering)
    assert [u["site"] for u in drill.report["unanswered"]] == [ignoring]
    acted = {r["site"]: r["request_id"] for r in drill.producer.restarts}
    assert acted == {site: plan[site] for site in answering}
    assert [(s["site"], s["why"]) for s in drill.producer.restarts_skipped] == [(ignoring, "ignored")]
    [unanswered] = [a for a in drill.alerts if a["failure_class"] == "RESTART_UNANSWERED"]
    assert ignoring in unanswered["summary"] and not any(site in unanswered["summary"] for site in answering)
    [evidence] = unanswered["failure"]["evidence"]
    assert evidence.startswith(f"{ignoring}: no new session for {plan[ignoring]}")
    assert "last clean session start 20" in evidence and "s ago" in evidence
    assert f'"sites": ["{ignoring}"]' in unanswered["next_action"]


def test_the_damaged_site_heals_with_a_clean_new_session_and_its_loss_ends_within_seconds_of_its_turn(
        drill: Drill) -> None:
    damaged = drill.sites[0]
    [gap] = drill.producer.gaps_injected
    assert gap["topic"] == damaged
    output = drill.settings.root("output")
    rows, dead = read_table(output / SESSION_ROWS), read_table(output / QUARANTINE)
    assert_offsets_accounted(output, all_offsets(drill.settings.bootstrap_servers, drill.sites))
    # the loss: the damaged session's records from its gap to its end, all in quarantine, reported
    lost = sorted((d for d in dead.to_pylist() if d["topic"] == damaged), key=lambda d: d["offset"])
    assert {d["key"].decode() for d in lost} == {gap["session_id"]}
    assert lost[0]["error_class"] == "SEQUENCE_GAP" and {d["error_class"] for d in lost[1:]} <= {"RESYNC_SKIPPED"}
    loss = drill.report["losses"][damaged]
    assert loss["records"] == len(lost) and loss["sessions"] == 1
    # The loss ends with the site's answer, which follows its turn within REACTION_S. A schedule brings a run within
    # one interval of a gap; this drill runs it once the gap is seen, so the time before the plan is the drill's own
    # (detection and the run's start, slow on a busy machine) and is measured, not bounded.
    turn = next(t for t in drill.report["plan"]["turns"] if t["site"] == damaged)
    [answer] = [a for a in drill.report["answers"].values() if a["site"] == damaged]
    first, last = datetime.fromisoformat(loss["first_at"]), datetime.fromisoformat(loss["last_at"])
    planned, turn_at = (datetime.fromisoformat(drill.report["plan"]["created_at"]),
                        datetime.fromisoformat(turn["not_before"]))
    opened = datetime.fromisoformat(answer["opened_at"])
    # The loss's last record is the old session's end, sent in the answer just before the new session's snapshot:
    # its time is the broker's (milliseconds, taken when the end was handed to the client), the answer's the event
    # time both were made with (microseconds, taken before), so the end follows it by the moments the sending took
    ends_after_s = (last - opened).total_seconds()
    assert -0.001 < ends_after_s < ANSWER_SENT_S and (opened - turn_at).total_seconds() <= REACTION_S, (
        loss, turn, answer)
    detected_s = (planned - first).total_seconds()
    bound = detected_s + (turn_at - planned).total_seconds() + REACTION_S
    assert loss["span_s"] <= bound, (loss, drill.report["plan"], answer)
    site_rate = drill.producer.topics[damaged] / drill.producer.elapsed_s
    assert loss["records"] <= site_rate * bound * 1.2, (loss, site_rate)
    assert not [d for d in dead.to_pylist() if d["topic"] != damaged], "no other site lost anything"
    # every session open at the end is a new one (opened by the restart, or the ignoring site's), exact cell for cell
    expected = drill.producer.expected_tables
    assert expected is not None and gap["session_id"] not in expected
    got = final_tables(rows, DEMO_SCHEMA)
    assert {s: got[s] for s in expected} == expected
    starts = rows.filter(pc.equal(rows["boundary"], "start")).to_pylist()
    opened_by = {r["session_id"]: r["restart_request"] for r in starts}
    plan = {t["site"]: t["request_id"] for t in drill.report["plan"]["turns"]}
    for session in expected:
        site = next(s for s in drill.sites if session.startswith(f"s{drill.sites.index(s)}-"))
        assert opened_by[session] == (plan[site] if site != drill.sites[2] else None), session
    # the old sessions of the answering sites ended: visible as boundaries
    ends = {r["session_id"] for r in rows.filter(pc.equal(rows["boundary"], "end")).to_pylist()}
    old = {s for s in opened_by if opened_by[s] is None and not s.startswith("s2-")}
    assert old - {gap["session_id"]} <= ends
    assert drill.report["sites"][damaged]["exposure_s"] < INTERVAL


def test_validation_reports_every_sites_exposure_and_finds_only_the_ignoring_site_over_the_limit(
        drill: Drill) -> None:
    exposure = drill.validation["exposure"]
    assert exposure["limit_s"] == 1.5 * INTERVAL
    assert {s["site"] for s in exposure["sites"]} == set(drill.sites)
    assert [(f["class"], f["topic"]) for f in drill.validation["findings"]] == [("EXPOSURE", drill.sites[2])]
    assert drill.validation_states["report_and_alert"] == "failed"
    [alert] = [a for a in read_alerts(drill.settings.run_paths.alerts) if a["failure_class"] == "EXPOSURE"
               and a["source"].startswith("validate_output")]
    assert alert["severity"] == "warning" and alert["summary"].startswith("validate_output: FAILED EXPOSURE 1 ")
    assert [e.split(" ")[:3] for e in alert["failure"]["evidence"]] == [["EXPOSURE", "session_rows", drill.sites[2]]]
    assert "restart_sessions" in alert["next_action"] and drill.sites[2] in alert["next_action"]
