"""A recovery's executing steps on tables the real DeltaSink committed, the real broker and the real filesystem:
what each step leaves, that a re-run changes nothing, and that a kill -9 anywhere followed by a re-run ends in
the same state as an uninterrupted run."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from fixtures import TESTS
from fixtures.small_tables import run_maintenance
from fixtures.stream_output import commit_batch, settings_for
from fixtures.stream_process import produce_raw
from streamwarden.atomic import write_json_atomic
from streamwarden.failures import EXIT_CODES, FailureClass, FailureDocument, IntegrityError
from streamwarden.local.broker import LocalBroker
from streamwarden.maintenance.compaction import Journal
from streamwarden.maintenance.steps import maintenance_folder
from streamwarden.recovery import steps
from streamwarden.recovery.plan import RecoveryPlan
from streamwarden.recovery.request import request_from_params
from streamwarden.runfiles.checkpoint import INITIAL_OFFSETS_FILE
from streamwarden.runfiles.failure_file import write_failure
from streamwarden.runfiles.hold import read_hold
from streamwarden.settings import Settings
from streamwarden.tables.committed import Runs
from streamwarden.tables.location import QUARANTINE, SESSION_ROWS, TableLocation
from streamwarden.tables.lock import TableBusyError, table_lock
from streamwarden.validation.report import LAST_VALIDATED, last_validated

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
OWNER = "recover_stream/drill"
EXECUTE = """
import sys
from pathlib import Path
from streamwarden.recovery import steps
from streamwarden.recovery.plan import RecoveryPlan
from streamwarden.settings import load_settings
import json
settings = load_settings(home=Path(sys.argv[1]) / "home", output_root=Path(sys.argv[1]) / "out",
                         bootstrap_servers=sys.argv[2], topic_pattern=sys.argv[3])
approved = RecoveryPlan.from_json(json.loads(Path(sys.argv[4]).read_text()))
executed = steps.hold_and_stop(settings, approved, owner="recover_stream/drill", stop=lambda: "not running")
print("held", flush=True)
steps.archive_checkpoint(settings, executed)
print("archived", flush=True)
steps.restore_tables(settings, executed)
print("restored", flush=True)
steps.seed_checkpoint(settings, executed)
print("seeded", flush=True)
"""


def _tables(tmp_path: Path, bootstrap: str, topic: str, ends: dict[int, int]) -> Settings:
    """Both tables at two batches (first half, then the rest); the first validated; a checkpoint and a failure
    document as a stopped stream leaves them."""
    settings = settings_for(tmp_path, bootstrap_servers=bootstrap, topic_pattern=topic)
    first = commit_batch(settings, {topic: {p: (0, e // 2) for p, e in ends.items()}}, 0)
    commit_batch(settings, {topic: {p: (e // 2, e) for p, e in ends.items()}}, 1)
    folder = settings.run_paths.validation
    folder.mkdir(parents=True)
    write_json_atomic(folder / LAST_VALIDATED, {"tables": {name: {"version": v} for name, v in first.items()}})
    (settings.checkpoint_location / "commits").mkdir(parents=True)
    (settings.checkpoint_location / "commits" / "1").write_text("v1\n{}")
    settings.run_paths.failure.parent.mkdir(parents=True, exist_ok=True)
    settings.run_paths.failure.write_text("{}")
    return settings


def _plan(settings: Settings) -> RecoveryPlan:
    request = request_from_params({"dry_run": False, "reason": "drill"}, settings)
    return steps.plan(settings, request, run_key=OWNER, now=NOW)


def _execute(settings: Settings, approved: RecoveryPlan) -> RecoveryPlan:
    executed = steps.hold_and_stop(settings, approved, owner=OWNER, stop=lambda: "not running")
    steps.archive_checkpoint(settings, executed)
    steps.restore_tables(settings, executed)
    steps.seed_checkpoint(settings, executed)
    return executed


def _state(settings: Settings, topic: str, partitions: list[int]) -> dict[str, Any]:
    """What a recovery leaves, without what differs by when it ran (timestamps)."""
    tables = {}
    for name in (SESSION_ROWS, QUARANTINE):
        table = TableLocation.of(settings, name).open()
        tables[name] = {"version": table.version(), "files": sorted(Path(u).name for u in table.file_uris()),
                        "claims": Runs.read(table, [(topic, p) for p in partitions]).index()}
    log = [json.loads(line) for line in settings.run_paths.recoveries_log.read_text().splitlines()]
    archive = settings.root("checkpoint") / "archive"
    return {"tables": tables, "seed": json.loads((settings.checkpoint_location / INITIAL_OFFSETS_FILE).read_text()),
            "checkpoint": sorted(p.name for p in settings.checkpoint_location.iterdir()),
            "archived": sorted(str(p.relative_to(archive)) for p in archive.rglob("*")),
            "recoveries": [(e["recovery_id"], e["resume"], e["tables"]) for e in log],
            "validated": {n: e["version"] for n, e in (last_validated(settings.run_paths.validation)
                                                       or {"tables": {}})["tables"].items()},
            "hold": read_hold(settings) is not None}


@pytest.fixture()
def case(tmp_path: Path, broker: LocalBroker, topic_factory: Callable[..., list[str]]
         ) -> tuple[str, dict[int, int], Callable[[Path], Settings]]:
    (topic,) = topic_factory(1, partitions=2)
    ends = produce_raw(broker.bootstrap_servers, [topic], 400)[topic]
    return topic, ends, lambda where: _tables(where, broker.bootstrap_servers, topic, ends)


def test_each_step_leaves_its_part_and_a_rerun_changes_nothing(
        case: tuple[str, dict[int, int], Callable[[Path], Settings]], tmp_path: Path) -> None:
    topic, ends, make = case
    settings = make(tmp_path / "a")
    approved = _plan(settings)
    executed = _execute(settings, approved)
    state = _state(settings, topic, sorted(ends))
    half = {p: e // 2 for p, e in ends.items()}
    assert state["seed"] == {topic: {str(p): o for p, o in half.items()}}
    assert state["checkpoint"] == [INITIAL_OFFSETS_FILE] and state["hold"] is True  # start_stream releases it
    assert any(name.endswith("/commits/1") for name in state["archived"])
    for table in state["tables"].values():
        assert table["version"] == 3 and table["claims"] == {topic: {p: [(0, o)] for p, o in half.items()}}
    assert state["validated"] == {SESSION_ROWS: 3, QUARANTINE: 3}, "the validated content is at the restore commit"
    assert [r[0] for r in state["recoveries"]] == [executed.recovery_id]
    assert (settings.run_paths.recovery(executed.recovery_id) / "last_failure.json").is_file()
    assert not settings.run_paths.failure.exists()
    _execute(settings, approved)
    assert _state(settings, topic, sorted(ends)) == state, "a re-run of every step changes nothing"


@pytest.mark.parametrize("kill_after", ["held", "archived", "restored", "seeded", 0.05, 0.3])
def test_a_kill_9_anywhere_then_a_rerun_ends_as_an_uninterrupted_run(
        case: tuple[str, dict[int, int], Callable[[Path], Settings]], tmp_path: Path,
        kill_after: str | float) -> None:
    topic, ends, make = case
    reference = make(tmp_path / "reference")
    _execute(reference, _plan(reference))
    expected = _state(reference, topic, sorted(ends))

    settings = make(tmp_path / "killed")
    approved = _plan(settings)
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(approved.to_json()))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))}
    process = subprocess.Popen([sys.executable, "-c", EXECUTE, str(tmp_path / "killed"), settings.bootstrap_servers,
                                settings.topic_pattern, str(plan_file)], stdout=subprocess.PIPE, text=True, env=env)
    assert process.stdout is not None
    if isinstance(kill_after, str):
        for line in process.stdout:
            if line.strip() == kill_after:
                break
    else:
        time.sleep(kill_after)
    process.send_signal(signal.SIGKILL)
    process.wait(30)
    _execute(settings, approved)
    state = _state(settings, topic, sorted(ends))
    for name, table in state["tables"].items():  # the restore's file names are the same; the version too
        assert table == expected["tables"][name], name
    assert {k: v for k, v in state.items() if k not in ("tables", "archived", "recoveries")} == \
        {k: v for k, v in expected.items() if k not in ("tables", "archived", "recoveries")}
    assert [r[1:] for r in state["recoveries"]] == [r[1:] for r in expected["recoveries"]], "recorded once"
    shutil.rmtree(tmp_path / "reference")


def test_the_wait_for_the_replay_fails_at_once_when_the_stream_stopped_with_a_failure(
        case: tuple[str, dict[int, int], Callable[[Path], Settings]], tmp_path: Path) -> None:
    topic, ends, make = case
    settings = make(tmp_path)
    executed = _execute(settings, _plan(settings))
    done, behind = steps.caught_up(settings, executed)
    assert not done and set(behind) == {f"{topic}[{p}]" for p in ends}, "nothing replayed yet: wait"
    write_failure(settings.run_paths.failure, FailureDocument(FailureClass.INTEGRITY, "update before its snapshot",
                                                         EXIT_CODES[FailureClass.INTEGRITY], topic, 0, 7))
    with pytest.raises(IntegrityError, match="stopped during the replay: update before its snapshot") as raised:
        steps.caught_up(settings, executed)
    assert (raised.value.topic, raised.value.partition, raised.value.offset) == (topic, 0, 7)


def test_a_compaction_a_killed_maintenance_run_left_unproven_is_proven_before_the_plan(
        case: tuple[str, dict[int, int], Callable[[Path], Settings]], tmp_path: Path) -> None:
    *_, tables = case
    settings = tables(tmp_path)
    location = TableLocation.of(settings, SESSION_ROWS)
    rows_before = location.open().to_pyarrow_table(columns=["topic"]).num_rows
    killed = run_maintenance(settings, kill_at="after_compaction_commit")
    assert killed.returncode == -9, killed.stderr
    journal = Journal.path(maintenance_folder(settings), SESSION_ROWS)
    assert journal.exists()
    compacted = location.open().version()

    plan = _plan(settings)  # refused (CONFIG: "run maintain_tables first") before the recovery proved it itself

    assert not journal.exists()
    assert location.open().version() == compacted  # proven, not reverted: no commit after it
    assert location.open().to_pyarrow_table(columns=["topic"]).num_rows == rows_before
    assert {t.table: t.newest for t in plan.tables}[SESSION_ROWS] == compacted


def test_a_compaction_still_running_fails_the_plan_naming_it(
        case: tuple[str, dict[int, int], Callable[[Path], Settings]], tmp_path: Path) -> None:
    *_, tables = case
    settings = tables(tmp_path)
    folder = maintenance_folder(settings)
    journal = Journal(SESSION_ROWS, "source_topic=x", TableLocation.of(settings, SESSION_ROWS).open().version(),
                      "run1", NOW.isoformat())
    write_json_atomic(Journal.path(folder, SESSION_ROWS), journal.__dict__)
    with table_lock(folder / "locks", SESSION_ROWS), pytest.raises(TableBusyError, match="another maintenance run"):
        _plan(settings)
    assert Journal.path(folder, SESSION_ROWS).exists()  # the running compaction's journal is its own
    _plan(settings)  # once it is done: the journal's partition had no commit, so it is dropped, and the plan made
    assert not Journal.path(folder, SESSION_ROWS).exists()
