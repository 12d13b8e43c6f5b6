"""``recover_stream`` end to end, as an operator runs it: the real stream on the real broker, ``airflow standalone``
on a loopback port, and a real browser (headless Chromium) in Airflow's UI: every run triggered from the DAG's
Trigger form, every approval answered on its "Required Actions" tab.

1. the stream lands a first batch of records and one validation passes: its versions become the last validated;
2. more records land (newer versions, the ones a roll-back undoes);
3. a dry run, the form submitted with every default, succeeds and changes nothing: the tables' versions, the
   checkpoint folder, the running stream;
4. a real run to ``last_validated`` (the form's dry-run switch turned off) shows the plan in its approval request,
   is approved in the UI and succeeds: the tables hold the validated version's rows plus the replayed ones, every
   offset the broker holds exactly once, and the run's own validation passed;
5. another real run is rejected in the UI: reported as rejected by the admin, nothing changed;
6. each of the other five DAGs is triggered from its form with its defaults (``upgrade_stream`` with a release
   picked): each run carries the defaults as its conf and its Params are accepted.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from fixtures.airflow_server import AirflowServer
from fixtures.approvals import answer_in_browser
from fixtures.browser import chromium_and_driver, headless_chromium, log_in, trigger_from_form
from fixtures.stream_process import StreamProcess, all_offsets, holder_pid, log_ends, produce_raw, stream_env
from streamwarden.local.broker import LocalBroker
from streamwarden.tables.location import RECORDS
from streamwarden.testing.exactly_once import verify_table
from streamwarden.testing.replay import OFFSET_COLUMNS, caught_up
from streamwarden.validation.report import last_validated
from streamwarden.warden.stop import stop_stream

pytestmark = pytest.mark.slow

DAG_ID = "recover_stream"
CHANGES = ("approve", "hold_and_stop", "archive_checkpoint", "restore_tables", "seed_checkpoint", "start_stream",
           "wait_caught_up", "validate")
Offsets = set[tuple[str, int, int]]


def _offsets(table: Path, version: int | None = None) -> Offsets:
    data = DeltaTable(str(table), version=version).to_pyarrow_table(columns=list(OFFSET_COLUMNS))
    return set(zip(*(data.column(c).to_pylist() for c in OFFSET_COLUMNS), strict=True))


def _version(table: Path) -> int:
    return DeltaTable(str(table)).version()


def _listing(folder: Path) -> dict[str, int]:
    """Every file under ``folder`` with its size: what a dry run must leave alone."""
    return {str(p.relative_to(folder)): p.stat().st_size for p in sorted(folder.rglob("*")) if p.is_file()}


def _validate(env: dict[str, str], log: Path) -> None:
    """One validation as ``validate_output`` makes it (coverage and the data expectations read the rows): passing,
    it records the versions it read as the last validated ones."""
    with open(log, "ab") as out:
        code = subprocess.run([sys.executable, "-m", "streamwarden", "validate", "--check", "coverage",
                               "--check", "checkpoint", "--check", "expectations"], env=env, stdout=out,
                              stderr=subprocess.STDOUT, timeout=240).returncode
    assert code == 0, log.read_text(errors="replace")[-4000:]


OTHER_DAGS = ("stream_supervisor", "maintain_tables", "validate_output", "restart_sessions", "upgrade_stream")
RELEASE = "tuned"


def test_recover_stream_from_the_ui_dry_run_approved_and_rejected_and_every_dag_triggered_from_its_form(
        broker: LocalBroker, topic_factory: Callable[..., list[str]], tmp_path: Path) -> None:
    chromium_and_driver()  # skip at once, saying why, without the browser
    started = time.monotonic()
    shots = tmp_path / "screenshots"
    topics = topic_factory(2, partitions=2)
    pattern = f"{topics[0].rsplit('-', 1)[0]}-.*"
    env = stream_env(tmp_path / "home", broker.bootstrap_servers, pattern, warden_startup_grace="150s",
                     warden_drain_timeout="60s", warden_term_timeout="10s", warden_lease_timeout="150s")
    first = produce_raw(broker.bootstrap_servers, topics, 3_000)
    job = StreamProcess(env, tmp_path / "stream.log").start()
    settings = job.settings
    releases = settings.home_paths.releases  # installed before Airflow parses upgrade_stream, whose form offers it
    releases.mkdir(parents=True, exist_ok=True)
    (releases / f"{RELEASE}.yaml").write_text("trigger_interval: 2s\n")
    table = settings.root("output") / RECORDS
    seconds: dict[str, float] = {}
    driver = None
    try:
        with AirflowServer(tmp_path / "airflow", env) as airflow:
            # 1. a first batch lands and is validated (while Airflow comes up)
            job.wait_until(lambda: job.caught_up(first), 240, "the first records")
            _validate(env, tmp_path / "validate.log")
            validated = last_validated(settings.run_paths.validation)
            assert validated is not None
            target = validated["tables"][RECORDS]["version"]
            target_offsets = _offsets(table, target)
            assert len(target_offsets) == 3_000
            seconds["validated"] = time.monotonic() - started

            # 2. more records, newer versions
            more = produce_raw(broker.bootstrap_servers, topics, 2_000)
            job.wait_until(lambda: job.caught_up(more), 240, "the second records")
            assert _version(table) > target

            api = airflow.ready(DAG_ID, *OTHER_DAGS)
            assert api.import_errors() == []
            base = f"http://127.0.0.1:{airflow.port}"
            driver = headless_chromium()
            log_in(driver, base, json.loads((airflow.home / "simple_auth_manager_passwords.json.generated")
                                            .read_text())["admin"], shots)
            seconds["airflow ready"] = time.monotonic() - started

            # 3. a dry run from the form as it opens (every Param at its default): the plan, and nothing changed
            before = {"version": _version(table), "checkpoint": _listing(settings.checkpoint_location),
                      "pid": holder_pid(settings)}
            assert before["pid"] is not None
            dry = trigger_from_form(driver, base, DAG_ID, shots)
            assert airflow.run(DAG_ID, dry)["conf"] == _defaults(api, DAG_ID)
            assert airflow.wait_run(DAG_ID, dry, 240)["state"] == "success", airflow.task_states(DAG_ID, dry)
            states = airflow.task_states(DAG_ID, dry)
            assert states["check_params"] == states["plan_recovery"] == states["report_and_alert"] == "success"
            assert {states[t] for t in CHANGES} == {"skipped"}, states
            assert airflow.xcom(DAG_ID, dry, "plan_recovery") is not None
            after = {"version": _version(table), "checkpoint": _listing(settings.checkpoint_location),
                     "pid": holder_pid(settings)}
            assert after == before
            seconds["dry run"] = time.monotonic() - started

            # 4. for real (the form's dry-run switch off, a reason typed): approved in the UI
            reason = "e2e: roll back to the last validated version"
            run_id = trigger_from_form(driver, base, DAG_ID, shots, switch=("dry_run",), text={"reason": reason})
            assert airflow.run(DAG_ID, run_id)["conf"] == {**_defaults(api, DAG_ID), "dry_run": False,
                                                           "reason": reason}
            approval = answer_in_browser(api, driver, base, shots, dag_id=DAG_ID, run_id=run_id, task_id="approve",
                                         option="Approve", timeout=240,
                                         settled=lambda: airflow.parked(DAG_ID, run_id, "approve"))
            assert approval.body is not None
            assert "| table | newest | restore to |" in approval.body and f"| {RECORDS} |" in approval.body
            assert "| topic | partition | resume at |" in approval.body
            run = airflow.wait_run(DAG_ID, run_id, 300)
            states = airflow.task_states(DAG_ID, run_id)
            assert run["state"] == "success", (states, airflow.log_tail())
            assert all(states[t] == "success" for t in (*CHANGES, "report_and_alert")), \
                (states, airflow.task_logs(DAG_ID, run_id, "approve"))
            plan = _plan(airflow.xcom(DAG_ID, run_id, "hold_and_stop"))  # planned again once the stream stopped
            report: dict[str, Any] = airflow.xcom(DAG_ID, run_id, "report_and_alert")
            seconds["recovered"] = time.monotonic() - started

            # the stream runs again (checked before Airflow stops: it started it), every offset once
            pid = holder_pid(settings)
            assert pid is not None and pid != before["pid"]
            expected = all_offsets(broker.bootstrap_servers, topics)
            assert caught_up(settings.checkpoint_location, log_ends(expected))
            final = _offsets(table)
            assert target_offsets <= final  # the validated version's rows are kept
            assert final == expected  # the undone ones were replayed: nothing lost
            check = verify_table(table)
            assert check.ok and check.duplicates == 0 and check.rows == len(expected), check.summary()  # once each
            replayed = final - target_offsets
            resume = {(p["topic"], p["partition"]): p["resume"] for p in plan["partitions"]}
            assert all(offset >= resume[(t, p)] for t, p, offset in replayed)
            assert _version(table) > before["version"]
            assert report is not None, "report_and_alert returned its summary"
            assert report["outcome"] == "recovered and validated", report
            assert report["validation"]["passed"], report["validation"]
            assert Path(report["report"]).is_file() and Path(report["report"]).parent.parent.name == "recoveries"
            seconds["checked"] = time.monotonic() - started

            # 5. another real run, rejected in the UI: told as such, nothing changed
            pid, version = holder_pid(settings), _version(table)
            rejected = trigger_from_form(driver, base, DAG_ID, shots, switch=("dry_run",),
                                         text={"reason": "e2e: no"})
            answer_in_browser(api, driver, base, shots, dag_id=DAG_ID, run_id=rejected, task_id="approve",
                              option="Reject", timeout=240,
                              settled=lambda: airflow.parked(DAG_ID, rejected, "approve"))
            assert airflow.wait_run(DAG_ID, rejected, 240)["state"] == "success"
            states = airflow.task_states(DAG_ID, rejected)
            assert states["approve"] == states["report_and_alert"] == "success", states
            assert {states[t] for t in CHANGES if t != "approve"} == {"skipped"}, states
            told = airflow.xcom(DAG_ID, rejected, "report_and_alert")
            assert told["outcome"].startswith("not approved: rejected by admin at "), told  # not "no answer"
            assert (holder_pid(settings), _version(table)) == (pid, version)
            seconds["rejected"] = time.monotonic() - started

            # 6. every other DAG from its form with its defaults (a release picked for upgrade_stream)
            triggered = {dag_id: trigger_from_form(driver, base, dag_id, shots,
                                                   choose={"release": RELEASE} if dag_id == "upgrade_stream" else None)
                         for dag_id in OTHER_DAGS}
            for dag_id, run in triggered.items():
                expected = {**_defaults(api, dag_id), **({"release": RELEASE} if dag_id == "upgrade_stream" else {})}
                assert airflow.run(dag_id, run)["conf"] == expected, dag_id
                airflow.wait(lambda d=dag_id, r=run: _first_task_ended(airflow, d, r), 240, f"{dag_id}'s first task")
                first, state = _first_task_ended(airflow, dag_id, run) or ("", None)
                assert state == "success", (dag_id, first, airflow.task_logs(dag_id, run, first))
            seconds["six forms"] = time.monotonic() - started
            print(f"recover_stream e2e (s since start): {seconds}")
    finally:
        if driver is not None:
            driver.quit()
        stop_stream(settings, drain_timeout=30, term_timeout=10)
        if job.process is not None and job.process.poll() is None:
            job.kill9()


FIRST_TASKS = {"stream_supervisor": "check_health", "maintain_tables": "plan_compaction"}
"""The task that takes a DAG's Params first (the others': ``check_params``)."""


def _defaults(api: Any, dag_id: str) -> dict[str, Any]:
    """The DAG's Params at their defaults, as its details in the REST API give them."""
    status, details = api.call("GET", f"/api/v2/dags/{dag_id}/details")
    assert status == 200, (status, details)
    return {name: param.get("value") for name, param in details["params"].items()}


def _first_task_ended(airflow: AirflowServer, dag_id: str, run_id: str) -> tuple[str, str | None] | None:
    """``(task, state)`` of the run's first task once it ended, else None."""
    task = FIRST_TASKS.get(dag_id, "check_params")
    state = airflow.task_states(dag_id, run_id).get(task)
    return (task, state) if state in ("success", "failed", "upstream_failed", "skipped") else None


def _plan(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else json.loads(value)

