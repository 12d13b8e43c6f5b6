"""``upgrade_stream`` as Airflow parses and runs it (``dag.test()`` on the migrated DB): its shape and documentation,
and refusals before anything changes. The drills on the real stream are in
tests/drills/upgrade/test_upgrade_drills.py."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from fixtures import REPO
from streamwarden.alerts import read_alerts
from streamwarden.atomic import write_json_atomic
from streamwarden.runfiles.handler_pin import HANDLER_FILE, fingerprint
from streamwarden.runfiles.hold import read_hold
from streamwarden.settings import load_settings
from streamwarden.stream.sessions.table_handler import TableReconstruction
from streamwarden.upgrade.release import read_active

STEPS = ("check_params", "check_compatibility", "stop_if_dry_run", "hold_and_drain", "copy_checkpoint",
         "evolve_schema", "activate_release", "start_new", "watch_health", "rollback", "report_and_alert")
CHANGES = ("hold_and_drain", "copy_checkpoint", "evolve_schema", "activate_release", "start_new", "watch_health")


def _dag() -> Any:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags" / "upgrade_stream.py"))
    assert bag.import_errors == {}
    return bag.dags["upgrade_stream"]


def test_shape_params_and_documentation() -> None:
    dag = _dag()
    assert dag.max_active_runs == 1 and dag.catchup is False and type(dag.timetable).__name__ == "NullTimetable"
    assert {t.task_id for t in dag.tasks} == set(STEPS)
    assert set(dag.params.keys()) == {"release", "health_minutes", "dry_run", "reason"}
    assert dag.params["dry_run"] is True
    assert {t.task_id for t in dag.tasks if t.pool == "stream_lifecycle"} == {"hold_and_drain", "start_new",
                                                                             "rollback"}
    assert dag.get_task("rollback").trigger_rule == "one_failed"
    assert dag.get_task("rollback").upstream_task_ids == set(CHANGES)
    assert dag.get_task("report_and_alert").trigger_rule == "all_done"
    assert "stop_if_dry_run" not in dag.get_task("report_and_alert").upstream_task_ids  # it would skip the report
    assert dag.get_task("stop_if_dry_run").ignore_downstream_trigger_rules is False
    assert dag.get_task("watch_health").mode == "reschedule"
    for step, after in itertools.pairwise(STEPS[:9]):
        assert after in dag.get_task(step).downstream_task_ids, (step, after)
    for words in (*STEPS, "release", "health_minutes", "dry_run", "reason", "UPGRADE_REFUSED", "UPGRADE_ROLLED_BACK",
                  "UPGRADE_ROLLBACK_FAILED", "streamwarden release-hold", "docs/upgrade.md", "releases/",
                  "STREAMWARDEN_WARDEN_POKE_INTERVAL", "When it fails"):
        assert words in dag.doc_md, words


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("STREAMWARDEN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("STREAMWARDEN_BOOTSTRAP_SERVERS", "127.0.0.1:9")
    monkeypatch.syspath_prepend(str(REPO / "tests" / "upgrade"))
    (tmp_path / "home" / "releases").mkdir(parents=True)
    return tmp_path / "home"


def _states(run: Any) -> dict[str, str | None]:
    return {ti.task_id: ti.state for ti in run.get_task_instances()}


@pytest.mark.usefixtures("airflow_db")
def test_bad_params_are_named_at_once_and_alerted_before_anything_changes(home: Path) -> None:
    outside = home.parent / "elsewhere.yaml"
    outside.write_text("trigger_interval: 2s\n")
    (home / "releases" / "sneaky.yaml").symlink_to(outside)
    (home / "releases" / "v2.yaml").write_text("trigger_interval: 2s\n")
    from airflow.sdk.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError, match="health_minutes"):  # Airflow refuses a run outside the bounds
        _dag().test(run_conf={"release": "v2", "health_minutes": 1000})
    with pytest.raises(ParamValidationError, match="release"):  # and a release the form does not offer
        _dag().test(run_conf={"release": "v7"})
    states = _states(_dag().test(run_conf={"release": "sneaky", "health_minutes": 0.5, "dry_run": False}))
    assert states["check_params"] == "failed" and states["report_and_alert"] == "failed"
    assert all(states[t] in ("upstream_failed", "skipped") for t in CHANGES), states
    assert states["rollback"] in ("skipped", "upstream_failed")
    settings = load_settings()
    [alert] = read_alerts(settings.run_paths.alerts)
    assert alert["failure_class"] == "CONFIG" and alert["verdict"]["label"] == "UPGRADE_REFUSED(CONFIG)"
    assert "outside the releases folder" in alert["failure"]["message"]
    assert "Nothing was changed" in alert["next_action"]
    assert read_hold(settings) is None and read_active(settings) is None
    assert not (settings.root("run") / "upgrades").exists()


@pytest.mark.usefixtures("airflow_db")
def test_a_changed_state_layout_is_refused_by_the_compatibility_check(home: Path) -> None:
    settings = load_settings()
    write_json_atomic(settings.checkpoint_location / HANDLER_FILE, fingerprint(TableReconstruction(), 64))
    (home / "releases" / "v9.yaml").write_text("session_handler: fixtures.upgrade_handlers:ChangedLayout\n")
    states = _states(_dag().test(run_conf={"release": "v9", "dry_run": False}))
    assert states["check_params"] == "success" and states["check_compatibility"] == "failed", states
    assert states["report_and_alert"] == "failed"
    [alert] = read_alerts(settings.run_paths.alerts)
    assert alert["verdict"]["label"] == "UPGRADE_REFUSED(CONFIG)" and alert["verdict"]["step"] == "check_compatibility"
    assert "the state layout changes (state_version 1 -> 2)" in alert["failure"]["message"]
    assert read_hold(settings) is None and read_active(settings) is None
