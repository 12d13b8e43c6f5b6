"""A report task names each step that failed without a word or never ran, and fails its run: through
``dag.test()`` on a migrated Airflow DB, with the real report operators after a step that dies before it can
push its failure document (as a task does when Airflow's API is not up yet)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from streamwarden.alerts import read_alerts
from streamwarden.maintenance.report import read_history
from streamwarden.settings import Settings, load_settings


def _dies_without_a_document() -> None:
    raise ConnectionRefusedError("[Errno 111] Connection refused")  # outside run_step: nothing pushed


@pytest.fixture()
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("STREAMWARDEN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("STREAMWARDEN_VALIDATION_KAFKA", "false")
    return load_settings()


def _states(dag: Any) -> dict[str, str | None]:
    """Run ``dag``, defined here rather than in a DAG file, once it is in the database as a parsed one is."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.collection import update_dag_parsing_results_in_db
    from airflow.serialization.serialized_objects import LazyDeserializedDAG
    from airflow.utils.session import create_session

    DagBundlesManager().sync_bundles_to_db()
    with create_session() as session:
        update_dag_parsing_results_in_db("dags-folder", None, [LazyDeserializedDAG.from_dag(dag)], {}, None, set(),
                                         session=session)
    run = dag.test()
    return {ti.task_id: ti.state for ti in run.get_task_instances()}


@pytest.mark.usefixtures("airflow_db")
def test_maintenance_is_red_when_its_plan_died_and_says_which_steps_never_ran(
        settings: Settings, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    from airflow.providers.standard.operators.python import PythonOperator
    from airflow.sdk import DAG

    from streamwarden_airflow.operators.maintenance import (
        CleanUpTablesOperator,
        CompactPartitionsOperator,
        MaintenanceReportOperator,
    )
    from streamwarden_airflow.timetables import DEFAULT_START

    with DAG("maintenance_after_a_dead_plan", schedule=None, start_date=DEFAULT_START, catchup=False,
             default_args={"retries": 0}) as dag:
        plan = PythonOperator(task_id="plan_compaction", python_callable=_dies_without_a_document)
        compact = CompactPartitionsOperator(task_id="compact_and_prove", plan_task_id="plan_compaction")
        clean = CleanUpTablesOperator(task_id="vacuum_and_checkpoint", plan_task_id="plan_compaction",
                                      compact_task_id="compact_and_prove")
        report = MaintenanceReportOperator(task_id="record_report", plan_task_id="plan_compaction",
                                           compact_task_id="compact_and_prove",
                                           clean_up_task_id="vacuum_and_checkpoint")
        plan >> compact >> clean >> report

    with caplog.at_level(logging.INFO):
        states = _states(dag)
    logged = "".join(capfd.readouterr()) + caplog.text  # the run's failure is printed, the report logged

    assert states == {"plan_compaction": "failed", "compact_and_prove": "upstream_failed",
                      "vacuum_and_checkpoint": "upstream_failed", "record_report": "failed"}
    [history] = read_history(settings.run_paths.maintenance / "history.jsonl")
    assert history["outcome"].startswith("plan_compaction failed without a failure document")
    assert "no table to maintain yet" not in logged and "(nothing planned)" in logged
    assert ("maintenance failed: plan_compaction failed without a failure document (killed, or it lost Airflow's "
            "API: see its log); compact_and_prove never ran (a step before it failed); vacuum_and_checkpoint never "
            "ran (a step before it failed)") in logged
    assert read_alerts(settings.run_paths.alerts) == []  # no document, no alert: the red run and its log say it


@pytest.mark.usefixtures("airflow_db")
def test_validation_is_red_when_its_params_step_died_and_says_the_check_never_ran(
        settings: Settings, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    from airflow.providers.standard.operators.python import PythonOperator
    from airflow.sdk import DAG

    from streamwarden_airflow.operators.validation import ValidateTablesOperator, ValidationReportOperator
    from streamwarden_airflow.timetables import DEFAULT_START

    with DAG("validation_after_a_dead_step", schedule=None, start_date=DEFAULT_START, catchup=False,
             default_args={"retries": 0}) as dag:
        check = PythonOperator(task_id="check_params", python_callable=_dies_without_a_document)
        validate = ValidateTablesOperator(task_id="validate_tables", params_task_id="check_params")
        report = ValidationReportOperator(task_id="report_and_alert", params_task_id="check_params",
                                          validate_task_id="validate_tables")
        check >> validate >> report

    with caplog.at_level(logging.INFO):
        states = _states(dag)
    logged = "".join(capfd.readouterr()) + caplog.text  # the run's failure is printed, the report logged

    assert states == {"check_params": "failed", "validate_tables": "upstream_failed", "report_and_alert": "failed"}
    assert ("nothing validated: check_params failed without a failure document (killed, or it lost Airflow's API: "
            "see its log); validate_tables never ran (a step before it failed)") in logged
    assert "left no report" not in logged


@pytest.mark.usefixtures("airflow_db")
def test_session_restarts_are_red_when_their_params_step_died_and_say_the_plan_never_ran(
        settings: Settings, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    from airflow.providers.standard.operators.python import PythonOperator
    from airflow.sdk import DAG

    from streamwarden_airflow.operators.session_restarts import (
        PlanRestartsOperator,
        RestartReportOperator,
        SendRestartCommandsOperator,
    )
    from streamwarden_airflow.timetables import DEFAULT_START

    with DAG("restarts_after_a_dead_step", schedule=None, start_date=DEFAULT_START, catchup=False,
             default_args={"retries": 0}) as dag:
        check = PythonOperator(task_id="check_params", python_callable=_dies_without_a_document)
        plan = PlanRestartsOperator(task_id="plan_restarts", params_task_id="check_params")
        send = SendRestartCommandsOperator(task_id="send_commands", plan_task_id="plan_restarts")
        report = RestartReportOperator(task_id="report_and_alert", plan_task_id="plan_restarts",
                                       step_ids=["check_params", "plan_restarts", "send_commands"])
        check >> plan >> send >> report

    with caplog.at_level(logging.INFO):
        states = _states(dag)
    logged = "".join(capfd.readouterr()) + caplog.text

    assert states == {"check_params": "failed", "plan_restarts": "upstream_failed",
                      "send_commands": "upstream_failed", "report_and_alert": "failed"}
    assert ("no restart planned: check_params failed without a failure document (killed, or it lost Airflow's API: "
            "see its log); plan_restarts never ran (a step before it failed); send_commands never ran (a step "
            "before it failed)") in logged
    assert "left no plan" not in logged


@pytest.mark.usefixtures("airflow_db")
def test_a_recovery_is_red_and_reported_failed_when_a_step_died_without_a_document(
        settings: Settings, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    import json

    from airflow.providers.standard.operators.python import PythonOperator
    from airflow.sdk import DAG

    from streamwarden_airflow.operators.recovery import RecoveryReportOperator
    from streamwarden_airflow.timetables import DEFAULT_START

    with DAG("recovery_after_a_dead_step", schedule=None, start_date=DEFAULT_START, catchup=False,
             default_args={"retries": 0}) as dag:
        check = PythonOperator(task_id="check_params", python_callable=_dies_without_a_document)
        report = RecoveryReportOperator(task_id="report_and_alert")
        check >> report

    with caplog.at_level(logging.INFO):
        states = _states(dag)
    logged = "".join(capfd.readouterr()) + caplog.text

    assert states == {"check_params": "failed", "report_and_alert": "failed"}
    assert ("recovery failed: check_params failed without a failure document (killed, or it lost Airflow's API: "
            "see its log); clear the failed task of this run") in logged
    [report] = (settings.root("run") / "recoveries").glob("*/report.json")
    assert json.loads(report.read_text())["outcome"].startswith("failed: check_params failed without")
