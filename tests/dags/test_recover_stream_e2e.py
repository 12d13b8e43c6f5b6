"""``recover_stream`` end to end, as an operator runs it: the real stream on the real broker, ``airflow standalone``
on a loopback port, every run triggered and the approval answered through the REST API.

1. the stream lands a first batch of records and one validation passes: its versions become the last validated;
2. more records land (newer versions, the ones a roll-back undoes);
3. a dry run succeeds and changes nothing: the tables' versions, the checkpoint folder, the running stream;
4. a real run to ``last_validated`` shows the plan in its approval request, is approved over REST and succeeds:
   the tables hold the validated version's rows plus the replayed ones, every offset the broker holds exactly once,
   and the run's own validation passed.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from streamwarden_bench.replay import OFFSET_COLUMNS, caught_up

from airflow_server import AirflowServer
from approvals import answer_over_rest
from streamwarden.local.broker import LocalBroker
from streamwarden.settings import Settings
from streamwarden.tables.location import RECORDS
from streamwarden.validation.exactly_once import verify_table
from streamwarden.validation.report import last_validated, validation_folder
from streamwarden.warden.launcher import running_holder
from streamwarden.warden.stop import stop_stream
from support import StreamProcess, all_offsets, log_ends, produce_raw, stream_env

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


def _holder_pid(settings: Settings) -> int | None:
    holder = running_holder(settings)
    return None if holder is None else holder.pid


def _validate(env: dict[str, str], log: Path) -> None:
    """One validation as ``validate_output`` makes it (coverage and the data expectations read the rows): passing,
    it records the versions it read as the last validated ones."""
    with open(log, "ab") as out:
        code = subprocess.run([sys.executable, "-m", "streamwarden", "validate", "--check", "coverage",
                               "--check", "checkpoint", "--check", "expectations"], env=env, stdout=out,
                              stderr=subprocess.STDOUT, timeout=240).returncode
    assert code == 0, log.read_text(errors="replace")[-4000:]


def test_recover_stream_dry_run_then_approved_over_rest(
        broker: LocalBroker, topic_factory: Callable[..., list[str]], tmp_path: Path) -> None:
    started = time.monotonic()
    topics = topic_factory(2, partitions=2)
    pattern = f"{topics[0].rsplit('-', 1)[0]}-.*"
    env = stream_env(tmp_path / "home", broker.bootstrap_servers, pattern, warden_startup_grace="150s",
                     warden_drain_timeout="60s", warden_term_timeout="10s", warden_lease_timeout="150s")
    first = produce_raw(broker.bootstrap_servers, topics, 3_000)
    job = StreamProcess(env, tmp_path / "stream.log").start()
    settings = job.settings
    table = settings.root("output") / RECORDS
    seconds: dict[str, float] = {}
    try:
        with AirflowServer(tmp_path / "airflow", env) as airflow:
            # 1. a first batch lands and is validated (while Airflow comes up)
            job.wait_until(lambda: job.caught_up(first), 240, "the first records")
            _validate(env, tmp_path / "validate.log")
            validated = last_validated(validation_folder(settings.root("run")))
            assert validated is not None
            target = validated["tables"][RECORDS]["version"]
            target_offsets = _offsets(table, target)
            assert len(target_offsets) == 3_000
            seconds["validated"] = time.monotonic() - started

            # 2. more records, newer versions
            more = produce_raw(broker.bootstrap_servers, topics, 2_000)
            job.wait_until(lambda: job.caught_up(more), 240, "the second records")
            assert _version(table) > target

            api = airflow.ready(DAG_ID)
            assert api.import_errors() == []
            seconds["airflow ready"] = time.monotonic() - started

            # 3. a dry run: the plan, and nothing changed
            before = {"version": _version(table), "checkpoint": _listing(settings.checkpoint_location),
                      "pid": _holder_pid(settings)}
            assert before["pid"] is not None
            dry = airflow.trigger(DAG_ID, {"target": "last_validated", "dry_run": True, "reason": "e2e: dry run"})
            assert airflow.wait_run(DAG_ID, dry, 240)["state"] == "success", airflow.task_states(DAG_ID, dry)
            states = airflow.task_states(DAG_ID, dry)
            assert states["check_params"] == states["plan_recovery"] == states["report_and_alert"] == "success"
            assert {states[t] for t in CHANGES} == {"skipped"}, states
            assert airflow.xcom(DAG_ID, dry, "plan_recovery") is not None
            after = {"version": _version(table), "checkpoint": _listing(settings.checkpoint_location),
                     "pid": _holder_pid(settings)}
            assert after == before
            seconds["dry run"] = time.monotonic() - started

            # 4. for real: approved over REST
            run_id = airflow.trigger(DAG_ID, {"target": "last_validated", "dry_run": False,
                                              "reason": "e2e: roll back to the last validated version"})
            approval = answer_over_rest(api, DAG_ID, run_id, "approve", "Approve", timeout=240,
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
            pid = _holder_pid(settings)
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
            print(f"recover_stream e2e (s since start): {seconds}")
    finally:
        stop_stream(settings, drain_timeout=30, term_timeout=10)
        if job.process is not None and job.process.poll() is None:
            job.kill9()


def _plan(value: Any) -> dict[str, Any]:
    import json

    return value if isinstance(value, dict) else json.loads(value)

