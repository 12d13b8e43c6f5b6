"""``validate_output`` through ``dag.test()`` on a migrated Airflow DB and real Delta tables (Kafka not asked:
the drills on the real stream and broker are in tests/drills/validation/test_fault_drills.py)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fixtures import REPO
from fixtures.stream_output import commit_batch, committed_paths, remove_file, settings_for, write_checkpoint
from streamwarden.alerts import read_alerts
from streamwarden.settings import Settings
from streamwarden.tables.location import QUARANTINE, SESSION_ROWS
from streamwarden.tables.ranges import OffsetRanges
from streamwarden.validation.report import last_validated

STEPS = ("check_params", "validate_tables", "report_and_alert")
BATCH_0: OffsetRanges = {"sites-a": {0: (0, 100), 1: (0, 40)}}
BATCH_1: OffsetRanges = {"sites-a": {0: (100, 150), 1: (40, 45)}}


def _dag(dag_id: str = "validate_output") -> Any:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags" / f"{dag_id}.py"))
    assert bag.import_errors == {}
    return bag.dags[dag_id]


def _run(conf: dict[str, Any] | None = None) -> tuple[dict[str, str | None], Any]:
    run = _dag().test(run_conf=conf)
    return {ti.task_id: ti.state for ti in run.get_task_instances()}, run


def _summary(run: Any) -> dict[str, Any]:
    [ti] = [t for t in run.get_task_instances() if t.task_id == "validate_tables"]
    summary: dict[str, Any] = ti.xcom_pull(task_ids="validate_tables")
    return summary


@pytest.fixture()
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Both tables holding two committed batches, and a checkpoint that committed both."""
    monkeypatch.setenv("STREAMWARDEN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("STREAMWARDEN_OUTPUT_ROOT", str(tmp_path / "out"))
    monkeypatch.setenv("STREAMWARDEN_VALIDATION_KAFKA", "false")
    settings = settings_for(tmp_path)
    commit_batch(settings, BATCH_0, 0)
    commit_batch(settings, BATCH_1, 1)
    write_checkpoint(settings, [BATCH_0, BATCH_1])
    return settings


def test_shape_params_schedule_and_documentation() -> None:
    from airflow.sdk import AssetOrTimeSchedule, DeltaTriggerTimetable

    dag = _dag()
    assert dag.max_active_runs == 1 and dag.catchup is False
    assert [t.task_id for t in sorted(dag.tasks, key=lambda t: len(t.upstream_list))] == list(STEPS)
    assert set(dag.params.keys()) == {"tables", "checks", "versions", "as_of", "rows"}
    assert dag.get_task("report_and_alert").trigger_rule == "all_done"
    schedule = dag.timetable
    assert isinstance(schedule, AssetOrTimeSchedule)  # every 30 minutes, and after maintenance
    assert isinstance(schedule.timetable, DeltaTriggerTimetable)
    assert schedule.timetable.delta.total_seconds() == 1800
    assert {a.name for a in schedule.asset_condition.objects} == {"streamwarden.session_rows",
                                                                   "streamwarden.quarantine"}
    for words in (*STEPS, "GAP", "DUPLICATE", "CHECKPOINT_MISMATCH", "DATA_EXPIRED", "AUDIT_MISMATCH",
                  "EXPECTATION_FAILED", "STALE", "recover_stream", "last_validated.json", "as_of", "versions",
                  "STREAMWARDEN_VALIDATION_SCHEDULE", "data_docs"):
        assert words in dag.doc_md, words


def test_the_schedule_setting_chooses_the_timetable(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.sdk import AssetAny, AssetOrTimeSchedule, CronTriggerTimetable

    monkeypatch.setenv("STREAMWARDEN_VALIDATION_SCHEDULE", "@hourly")
    schedule = _dag().timetable
    assert isinstance(schedule, AssetOrTimeSchedule) and isinstance(schedule.timetable, CronTriggerTimetable)
    assert schedule.timetable.expression == "0 * * * *"
    monkeypatch.setenv("STREAMWARDEN_VALIDATION_SCHEDULE", "none")
    only_assets = _dag()
    assert isinstance(only_assets.timetable.asset_condition, AssetAny)
    assert not isinstance(only_assets.timetable, AssetOrTimeSchedule)


QUEUED_BY_MAINTENANCE = """
import json
from airflow.dag_processing.bundles.manager import DagBundlesManager
from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
from airflow.models.asset import AssetDagRunQueue, AssetEvent
from airflow.models.dag import DagModel
from airflow.utils.session import create_session
from sqlalchemy import select, update

bag = DagBag()  # what the DAG processor stores, the schedules on assets too
DagBundlesManager().sync_bundles_to_db()
sync_bag_to_db(bag, "dags-folder", None)
with create_session() as session:
    session.execute(update(DagModel).where(DagModel.dag_id == "validate_output").values(is_paused=False))
run = bag.dags["maintain_tables"].test(run_conf={"min_files": 2})
with create_session() as session:
    queued = session.execute(select(AssetDagRunQueue.target_dag_id)).scalars().all()
    sources = session.execute(select(AssetEvent.source_task_id).where(AssetEvent.source_run_id == run.run_id)
                              .distinct()).scalars().all()
print("RESULT " + json.dumps({"queued": sorted(queued), "sources": sources}))
"""


@pytest.mark.usefixtures("airflow_db")
def test_a_maintenance_run_queues_its_validation_from_one_task(settings: Settings, tmp_path: Path) -> None:
    """The DAGs stored as the DAG processor stores them, in a copy of the migrated DB (its own process: the
    stored DAGs must not leak into the other tests), then one maintenance run."""
    home = tmp_path / "airflow"
    home.mkdir()
    with sqlite3.connect(Path(os.environ["AIRFLOW_HOME"]) / "airflow.db") as source, \
            sqlite3.connect(home / "airflow.db") as copy:
        source.backup(copy)  # consistent, with what the write-ahead log holds
    env = {**os.environ, "AIRFLOW_HOME": str(home),
           "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
           "PYTHONPATH": os.pathsep.join([str(REPO / "include"), str(REPO / "plugins")])}
    done = subprocess.run([sys.executable, "-c", QUEUED_BY_MAINTENANCE], env=env, capture_output=True, text=True,
                          timeout=300)
    [line] = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")] or [done.stderr[-3000:]]
    result = json.loads(line.removeprefix("RESULT "))
    assert result["queued"] == ["validate_output"] * 2, result  # queued by each table's event, both at once from
    assert len(result["sources"]) == 1, result  # one task: the scheduler's next loop makes one asset-triggered run of
    # them (a loop between two tasks' events would make two)


@pytest.mark.usefixtures("airflow_db")
def test_clean_tables_pass_and_become_the_last_validated_versions(settings: Settings) -> None:
    states, run = _run()

    assert states == dict.fromkeys(STEPS, "success")
    summary = _summary(run)
    assert summary["passed"] and summary["versions"] == {SESSION_ROWS: 2, QUARANTINE: 2}
    assert "kafka" not in summary["checks"] and "coverage" in summary["checks"]
    report = json.loads(Path(summary["report"]).read_text())
    assert report["passed"] and {p["topic"] for p in report["partitions"]} == {"sites-a"}
    validated = last_validated(settings.run_paths.validation)
    assert validated is not None and validated["tables"][SESSION_ROWS]["version"] == 2
    assert not settings.run_paths.alerts.exists()


@pytest.mark.usefixtures("airflow_db")
def test_a_gap_fails_the_run_and_alerts_once_with_evidence_and_the_next_dag(settings: Settings) -> None:
    _run()  # versions 2 pass
    [victim] = [p for p in committed_paths(settings, SESSION_ROWS) if "part-0-1" in p][:1]
    removed_version = remove_file(settings, SESSION_ROWS, victim)

    states, run = _run()

    assert states == {"check_params": "success", "validate_tables": "failed", "report_and_alert": "failed"}
    summary = _summary(run)
    assert summary["classes"] == {"GAP": 1} and summary["versions"][SESSION_ROWS] == removed_version
    [gap] = summary["findings"]
    assert (gap["table"], gap["topic"], gap["partition"]) == (f"{SESSION_ROWS}+{QUARANTINE}", "sites-a", 0)
    [alert] = read_alerts(settings.run_paths.alerts)
    assert alert["failure_class"] == "GAP" and alert["severity"] == "critical"
    assert alert["failure"]["classes"] == {"GAP": 1} and alert["failure"]["report"] == summary["report"]
    assert any("sites-a[0]" in line for line in alert["failure"]["evidence"])
    assert 'recover_stream with Params {"target": "last_validated", "dry_run": true}' in alert["next_action"]
    assert 'validate_output with Params {"tables": ["quarantine", "session_rows"]}' in alert["next_action"]
    validated = last_validated(settings.run_paths.validation)
    assert validated is not None and validated["tables"][SESSION_ROWS]["version"] == 2  # not the damaged one

    states, _ = _run()  # the same gap again: the run fails, no second alert
    assert states["report_and_alert"] == "failed"
    assert len(read_alerts(settings.run_paths.alerts)) == 1


@pytest.mark.usefixtures("airflow_db")
def test_bad_params_fail_first_and_name_each_one(settings: Settings) -> None:
    states, _ = _run({"versions": {"sessions": 1}, "as_of": "yesterday", "checks": ["coverage"]})

    assert states == {"check_params": "failed", "validate_tables": "upstream_failed", "report_and_alert": "failed"}
    [alert] = read_alerts(settings.run_paths.alerts)
    assert alert["failure_class"] == "CONFIG"
    message = alert["failure"]["message"]
    assert "Param as_of" in message and "yesterday" in message
    assert "Param versions: table 'sessions' is not among this pipeline's tables" in message
    assert not list(settings.run_paths.validation.glob("*.json"))  # nothing validated or recorded


@pytest.mark.usefixtures("airflow_db")
def test_an_older_version_is_checked_by_the_checks_that_read_it_alone(settings: Settings) -> None:
    states, run = _run({"versions": {SESSION_ROWS: 1, QUARANTINE: 1}, "tables": [SESSION_ROWS]})
    assert states == dict.fromkeys(STEPS, "success")
    summary = _summary(run)
    assert summary["versions"] == {SESSION_ROWS: 1, QUARANTINE: 1}
    assert set(summary["checks"]) <= {"coverage", "expectations", "content"}  # none of the present's

    states, _ = _run({"versions": {SESSION_ROWS: 99, QUARANTINE: 2}})
    assert states["check_params"] == "success" and states["validate_tables"] == "failed"
    [alert] = read_alerts(settings.run_paths.alerts)
    assert alert["failure_class"] == "CONFIG" and "has no version 99: its newest is 2" in alert["failure"]["message"]
