"""``restart_sessions`` as Airflow parses and runs it (``dag.test()`` on the migrated DB); the drills on the real
stream are in tests/drills/session_restarts/test_restart_drills.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fixtures import REPO
from streamwarden.alerts import read_alerts
from streamwarden.kafka.admin import list_partitions, metadata_consumer
from streamwarden.local.broker import LocalBroker
from streamwarden.settings import load_settings

STEPS = ("check_params", "plan_restarts", "send_commands", "wait_for_new_sessions", "report_and_alert")


def _dag() -> Any:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags" / "restart_sessions.py"))
    assert bag.import_errors == {}
    return bag.dags["restart_sessions"]


def test_shape_params_schedule_and_documentation(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.sdk import CronTriggerTimetable, DeltaTriggerTimetable

    dag = _dag()
    assert dag.max_active_runs == 1 and dag.catchup is False
    assert [t.task_id for t in sorted(dag.tasks, key=lambda t: len(t.get_flat_relatives(upstream=True)))] == \
        list(STEPS)
    assert set(dag.params.keys()) == {"sites", "pattern", "reason", "jitter", "deadline"}
    assert dag.get_task("report_and_alert").trigger_rule == "all_done"
    sensor = dag.get_task("wait_for_new_sessions")
    assert sensor.mode == "reschedule" and sensor.poke_interval == 30
    assert isinstance(dag.timetable, CronTriggerTimetable) and dag.timetable.expression == "0 0 * * *"
    monkeypatch.setenv("STREAMWARDEN_SESSION_RESTART_SCHEDULE", "6h")
    assert isinstance(_dag().timetable, DeltaTriggerTimetable)
    for words in (*STEPS, "RESTART_UNANSWERED", "EXPOSURE", "CONFIG", "ENVIRONMENT", "STREAMWARDEN_CONTROL_TOPIC",
                  "STREAMWARDEN_SESSION_RESTART_SCHEDULE", "JITTER", "DEADLINE", "POKE_INTERVAL", "EXPOSURE_FACTOR",
                  "docs/wire-format.md", "sites", "pattern", "reason"):
        assert words in dag.doc_md, words


@pytest.mark.usefixtures("airflow_db")
def test_bad_params_fail_before_anything_is_sent_and_are_alerted_by_name(
        broker: LocalBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    control = f"control-{tmp_path.name}"
    for name, value in {"HOME": str(tmp_path / "home"), "BOOTSTRAP_SERVERS": broker.bootstrap_servers,
                        "CONTROL_TOPIC": control}.items():
        monkeypatch.setenv(f"STREAMWARDEN_{name}", value)
    run = _dag().test(run_conf={"sites": ["elsewhere-1"], "jitter": "soon"})
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states["check_params"] == "failed" and states["report_and_alert"] == "failed"
    assert states["send_commands"] in ("upstream_failed", None)
    [alert] = read_alerts(load_settings().run_paths.alerts)
    assert alert["failure_class"] == "CONFIG"
    assert "'elsewhere-1' is not a site of this stream" in alert["summary"] + alert["failure"]["message"]
    assert "Param jitter" in alert["failure"]["message"]
    consumer = metadata_consumer({"bootstrap.servers": broker.bootstrap_servers})
    try:
        assert not list_partitions(consumer, control), "no command was sent (the control topic was not created)"
    finally:
        consumer.close()
