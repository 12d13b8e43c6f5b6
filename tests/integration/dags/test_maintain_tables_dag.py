"""``maintain_tables`` through ``dag.test()`` on a migrated Airflow DB and real Delta tables."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fixtures import REPO
from fixtures.small_tables import replace_keeping_size, small_files_table
from streamwarden.alerts import read_alerts
from streamwarden.maintenance.report import read_history
from streamwarden.runfiles.hold import take_hold
from streamwarden.settings import Settings, load_settings
from streamwarden.tables.location import TableLocation

STEPS = ("plan_compaction", "compact_and_prove", "vacuum_and_checkpoint", "record_report")


def _dag() -> Any:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags" / "maintain_tables.py"))
    assert bag.import_errors == {}
    return bag.dags["maintain_tables"]


def _run(conf: dict[str, Any] | None = None) -> tuple[dict[str, str | None], Any]:
    run = _dag().test(run_conf=conf)
    return {ti.task_id: ti.state for ti in run.get_task_instances()}, run


@pytest.fixture()
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("STREAMWARDEN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("STREAMWARDEN_OUTPUT_ROOT", str(tmp_path / "out"))
    monkeypatch.setenv("STREAMWARDEN_MAINTENANCE_TARGET_FILE_SIZE", str(2**20))
    return load_settings()


def _files(location: TableLocation) -> int:
    return len(pa.table(location.open().get_add_actions()))


def test_shape_params_and_documentation() -> None:
    dag = _dag()
    assert dag.max_active_runs == 1 and dag.catchup is False
    assert [t.task_id for t in sorted(dag.tasks, key=lambda t: len(t.upstream_list))] == list(STEPS)
    assert set(dag.params.keys()) == {"tables", "partition_filter", "target_file_size_mib", "min_files", "dry_run"}
    assert dag.params["dry_run"] is False and dag.params["min_files"] == 5
    assert dag.get_task("record_report").trigger_rule == "all_done"
    for words in (*STEPS, "INTEGRITY", "CONFIG", "ENVIRONMENT", "partition_filter", "RETENTION", "history.jsonl"):
        assert words in dag.doc_md, words


@pytest.mark.usefixtures("airflow_db")
def test_a_run_compacts_proves_vacuums_and_reports(settings: Settings) -> None:
    location = small_files_table(settings)
    rows = location.open().to_pyarrow_table().num_rows
    assert _files(location) == 36

    states, run = _run({"tables": ["session_rows"]})

    assert states == dict.fromkeys(STEPS, "success")
    assert _files(location) == 3
    assert location.open().to_pyarrow_table().num_rows == rows
    [history] = read_history(settings.run_paths.maintenance / "history.jsonl")
    assert history["outcome"] == "ok"
    assert history["tables"]["session_rows"]["files_before"] == 36
    assert history["tables"]["session_rows"]["files_after"] == 3
    assert history["tables"]["session_rows"]["rows_proven"] == rows
    assert {p["action"] for p in history["partitions"]} == {"compacted, proven"}
    [cleanup] = history["cleanups"]
    assert cleanup["checkpoint_version"] == location.open().version()
    # one event for the table (compacted and cleaned up): validate_output runs once after the run
    [event] = _asset_events(run)
    assert (event["name"], event["extra"]["partitions_compacted"]) == ("streamwarden.session_rows", 3)
    assert event["extra"]["cleanup"]["table"] == "session_rows" and "files_deleted" in event["extra"]["cleanup"]


def _asset_events(run: Any) -> list[dict[str, Any]]:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.execute(select(AssetModel.name, AssetEvent.extra).join(AssetEvent.asset)
                               .where(AssetEvent.source_run_id == run.run_id)).all()
    return [{"name": name, "extra": extra} for name, extra in rows]


@pytest.mark.usefixtures("airflow_db")
def test_a_dry_run_plans_changes_nothing_and_records_the_plan(settings: Settings) -> None:
    location = small_files_table(settings, files_per_partition=6)
    version = location.open().version()

    states, _ = _run({"dry_run": True, "partition_filter": "topic=orders"})

    assert states == {"plan_compaction": "success", "compact_and_prove": "skipped",
                      "vacuum_and_checkpoint": "success", "record_report": "success"}
    assert location.open().version() == version and _files(location) == 18
    [history] = read_history(settings.run_paths.maintenance / "history.jsonl")
    assert history["outcome"] == "dry run"
    assert [(p["partition"], p["action"]) for p in history["partitions"]] == [
        ("topic=orders/date=2026-11-23", "would compact"), ("topic=orders/date=2026-11-24", "would compact")]
    assert history["cleanups"][0]["dry_run"] is True


@pytest.mark.usefixtures("airflow_db")
def test_a_tampered_file_is_reverted_alerted_and_reported(settings: Settings) -> None:
    location = small_files_table(settings)
    actions = pa.table(location.open().get_add_actions(flatten=True)).to_pylist()
    victim = next(a["path"] for a in actions if a["partition.topic"] == "payments")
    replace_keeping_size(location.path / victim, pq.read_table(location.path / victim).slice(2))
    files = _files(location)

    states, _ = _run({"partition_filter": "topic=payments"})

    assert states == {"plan_compaction": "success", "compact_and_prove": "failed",
                      "vacuum_and_checkpoint": "upstream_failed", "record_report": "failed"}
    assert _files(location) == files  # reverted
    [alert] = read_alerts(settings.run_paths.alerts)
    assert alert["failure_class"] == "INTEGRITY" and alert["severity"] == "critical"
    assert victim in alert["failure"]["message"] and "reverted by commit" in alert["failure"]["message"]
    assert "maintain_tables with Params" in alert["next_action"] and "validate_output" in alert["next_action"]
    [history] = read_history(settings.run_paths.maintenance / "history.jsonl")
    assert history["outcome"] == "compact_and_prove failed (INTEGRITY)"


@pytest.mark.usefixtures("airflow_db")
def test_a_bad_param_fails_the_plan_before_anything_changes(settings: Settings) -> None:
    location = small_files_table(settings, files_per_partition=6)
    version = location.open().version()

    states, _ = _run({"tables": ["records"], "partition_filter": "date=2026-11-23"})

    assert states["plan_compaction"] == "failed" and states["record_report"] == "failed"
    assert location.open().version() == version
    [alert] = read_alerts(settings.run_paths.alerts)
    assert alert["failure_class"] == "CONFIG"
    assert "Param tables: records not among this pipeline's tables" in json.dumps(alert)


@pytest.mark.usefixtures("airflow_db")
def test_while_an_upgrade_holds_the_stream_a_run_skips_its_changes_says_why_and_stays_green(
        settings: Settings) -> None:
    location = small_files_table(settings)
    take_hold(settings, "upgrade_stream/manual__test", "upgrade to release v2: watching its health")

    states, _ = _run({"tables": ["session_rows"]})

    # refused with CONFIG and a red run (and an alert) before: a scheduled run beside an upgrade is not a failure
    assert states == {"plan_compaction": "success", "compact_and_prove": "skipped", "vacuum_and_checkpoint": "skipped",
                      "record_report": "success"}
    assert _files(location) == 36
    [history] = read_history(settings.run_paths.maintenance / "history.jsonl")
    assert history["outcome"] == "skipped: the stream was held"
    assert read_alerts(settings.run_paths.alerts) == []
