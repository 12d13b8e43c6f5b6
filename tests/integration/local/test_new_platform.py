"""What ``up`` does before it starts anything, so that each run is a new platform: the previous state archived
(the newest three kept), what a crashed ``up`` left running killed, the Streamwarden DAGs paused in Airflow's
database; and what ``up`` says the supervisor will do about a stream that stopped."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psutil
import pytest

from fixtures import REPO
from streamwarden.failures import EXIT_CODES, ConfigError, FailureClass, FailureDocument
from streamwarden.local import archive
from streamwarden.local.clean_start import pause_in_database
from streamwarden.local.forecast import supervisor_forecast
from streamwarden.local.leftovers import MARK, kill_leftovers
from streamwarden.runfiles.failure_file import write_failure
from streamwarden.runfiles.hold import take_hold
from streamwarden.settings import Settings, load_settings
from streamwarden.warden.restart_policy import RestartHistory, save_history
from streamwarden.warden.settings import load_warden_settings

NOW = datetime(2026, 11, 27, 9, 15, tzinfo=UTC)


def _previous_run(settings: Settings) -> None:
    """What a run leaves: a checkpoint, a table's log, state scratch, run files (breaker history, logs)."""
    (settings.checkpoint_location / "commits").mkdir(parents=True)
    (settings.checkpoint_location / "commits" / "0").write_text("v1")
    (settings.root("output") / "session_rows" / "_delta_log").mkdir(parents=True)
    (settings.root("state") / "rocksdb").mkdir(parents=True)
    save_history(settings, RestartHistory(starts=[time.time()] * 4))
    (settings.run_paths.logs).mkdir(parents=True)
    (settings.home_paths.airflow).mkdir()
    (settings.home_paths.airflow / "airflow.db").write_text("kept")
    (settings.home_paths.releases).mkdir()


def test_the_previous_state_moves_into_one_dated_folder_and_the_airflow_home_stays(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path / "home")
    _previous_run(settings)

    archived = archive.archive_previous_state(settings, NOW)

    assert archived is not None
    assert archived.folder == settings.home_paths.archive / "20261127T091500Z"
    assert set(archived.moved) == {"checkpoint", "output", "state", "run"}
    assert sorted(p.name for p in settings.home.iterdir()) == ["airflow", "archive", "releases"]
    assert (archived.folder / "run" / "warden" / "restarts.json").is_file()
    assert (archived.folder / "checkpoint" / "streamwarden" / "commits" / "0").read_text() == "v1"
    assert archived.folder.stat().st_mode & 0o777 == 0o700
    assert "archived.json" in os.listdir(archived.folder)
    assert str(archived.folder) in archived.describe() and "newest 3" in archived.describe()
    assert archive.archive_previous_state(settings, NOW + timedelta(seconds=1)) is None  # nothing left to move


def test_roots_outside_the_home_are_archived_too_and_only_the_newest_three_kept(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path / "home", output_root=tmp_path / "elsewhere" / "out")
    folders = []
    for minute in range(5):
        (settings.root("output") / "quarantine").mkdir(parents=True)
        archived = archive.archive_previous_state(settings, NOW + timedelta(minutes=minute))
        assert archived is not None and archived.moved == ("output",)
        folders.append(archived.folder)

    assert not settings.root("output").exists()
    assert sorted((settings.home_paths.archive).iterdir()) == folders[-3:]
    assert archived.deleted == (folders[1],)


def test_tables_on_an_object_store_cannot_be_archived_so_up_refuses_to_start(s3_endpoint: str,
                                                                            tmp_path: Path) -> None:
    from fixtures.s3_server import BUCKET, storage_options
    from fixtures.small_tables import small_files_table

    settings = load_settings(home=tmp_path / "home", output_root=f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}/out",
                             storage_options=storage_options(s3_endpoint))
    assert archive.archive_previous_state(settings, NOW) is None  # an empty store: nothing to move or refuse
    small_files_table(settings, files_per_partition=1)

    with pytest.raises(ConfigError, match="holds the tables session_rows of an earlier run"):
        archive.archive_previous_state(settings, NOW)


def test_two_archives_in_one_second_do_not_collide(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path / "home")
    settings.root("run").mkdir(parents=True)
    (settings.run_paths.alerts).write_text("{}\n")
    first = archive.archive_previous_state(settings, NOW)
    settings.root("run").mkdir()
    (settings.run_paths.alerts).write_text("{}\n")
    second = archive.archive_previous_state(settings, NOW)

    assert first is not None and second is not None
    assert second.folder.name == f"{first.folder.name}-1"


def _sleeper(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env=env,
                            start_new_session=True)


def test_processes_marked_with_this_home_are_killed_and_no_other(tmp_path: Path) -> None:
    home = tmp_path / "home"
    left = _sleeper({**os.environ, MARK: str(home)})
    other_home = _sleeper({**os.environ, MARK: str(tmp_path / "other")})
    unmarked = _sleeper(dict(os.environ))
    try:
        deadline = time.monotonic() + 10  # the mark is read from /proc once the child has exec'd
        while psutil.Process(left.pid).environ().get(MARK) is None and time.monotonic() < deadline:
            time.sleep(0.05)

        killed = kill_leftovers(home)

        assert [line.split()[0] for line in killed] == [str(left.pid)]
        assert left.wait(10) == -9
        assert other_home.poll() is None and unmarked.poll() is None
    finally:
        for process in (left, other_home, unmarked):
            process.kill()
            process.wait()


def test_a_marked_process_is_killed_with_its_children_though_theirs_no_longer_shows_the_mark(
        tmp_path: Path) -> None:
    # as a child that renamed itself with setproctitle, whose /proc/<pid>/environ then shows its title
    home = tmp_path / "home"
    spawn = (f"import os, subprocess, sys, time; env = {{k: v for k, v in os.environ.items() if k != {MARK!r}}}; "
             "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], env=env); "
             "print(child.pid, flush=True); time.sleep(120)")
    parent = subprocess.Popen([sys.executable, "-c", spawn], env={**os.environ, MARK: str(home)},
                              stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert parent.stdout is not None
        child = psutil.Process(int(parent.stdout.readline()))
        assert MARK not in child.environ()

        killed = kill_leftovers(home)

        assert sorted(int(line.split()[0]) for line in killed) == sorted([parent.pid, child.pid])
        assert parent.wait(10) == -9
        child.wait(10)
    finally:
        parent.kill()
        parent.wait()


@pytest.mark.usefixtures("airflow_db")
def test_streamwarden_dags_are_paused_in_the_database_before_airflow_starts(airflow_db: Path) -> None:
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    assert pause_in_database(airflow_db / "absent.db") == 0
    DagBundlesManager().sync_bundles_to_db()
    sync_bag_to_db(DagBag(dag_folder=str(REPO / "dags")), "dags-folder", None)
    with create_session() as session:
        for model in session.query(DagModel):
            model.is_paused = False

    assert pause_in_database(airflow_db / "airflow.db") == 6

    ours = ["maintain_tables", "recover_stream", "restart_sessions", "stream_supervisor", "upgrade_stream",
            "validate_output"]
    with create_session() as session:
        assert {m.dag_id: m.is_paused for m in session.query(DagModel) if m.dag_id in ours} == dict.fromkeys(
            ours, True)


def _forecast(settings: Settings, *, paused: bool = False) -> str:
    return supervisor_forecast(settings, load_warden_settings(), paused=paused, dag_id="stream_supervisor")


def _failed(settings: Settings, failure_class: FailureClass, message: str) -> None:
    write_failure(settings.run_paths.failure, FailureDocument(failure_class, message, EXIT_CODES[failure_class]))


def test_up_tells_what_the_supervisor_will_do_about_a_stopped_stream(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path / "home")

    assert _forecast(settings) == "stream stopped (no failure recorded); stream_supervisor restarts it at once"
    assert "is paused, so nothing restarts it" in _forecast(settings, paused=True)

    _failed(settings, FailureClass.ENVIRONMENT, "no fetch response within 10s")
    assert _forecast(settings) == ("stream stopped (failed with ENVIRONMENT: no fetch response within 10s); "
                                   "stream_supervisor restarts it at once")

    save_history(settings, RestartHistory(starts=[time.time() - 5]))
    assert "restarts it after its backoff, at " in _forecast(settings)

    save_history(settings, RestartHistory(starts=[time.time() - 60] * 3))
    assert "will NOT restart it: it escalates (FAILED(ENVIRONMENT) and circuit breaker open" in _forecast(settings)

    save_history(settings, RestartHistory())
    _failed(settings, FailureClass.DATA_LOSS, "next offset 63484 is beyond the log end")
    said = _forecast(settings)
    assert "stream_supervisor will NOT restart it: it escalates (FAILED(DATA_LOSS)" in said
    assert "recover_stream" in said

    take_hold(settings, "recover_stream/manual__1", "restore the tables")
    assert "stream_supervisor leaves it: the stream is held stopped by recover_stream/manual__1" in _forecast(settings)
