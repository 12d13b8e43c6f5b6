"""End to end: ``streamwarden up --headless`` brings broker, producer and Airflow up, the supervisor DAG
starts the real stream, Parquet lands, and SIGINT leaves no process and no lease behind; started again on
the same home, after SIGINT and after a kill -9 of ``up``, it is a new platform that commits its own first
batch with no manual step, no escalation and no red run.

The first platform is ``make test``'s 5-minute long run (``make longrun``'s program): five minutes say
nothing about memory slopes (the report states them; a run of hours judges them), but they show every process
role of the platform running and sampled, the stream committing without a death or a red DAG run, the report
written, and no process outliving ``up``."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

import psutil
import pytest
from deltalake import DeltaTable
from streamwarden_longrun.roles import EXPECTED_ROLES

from fixtures import REPO
from streamwarden.alerts import read_alerts
from streamwarden.failures import EXIT_ALREADY_RUNNING
from streamwarden.local.airflow_api import AirflowApi
from streamwarden.local.leftovers import kill_leftovers
from streamwarden.local.up import LocalPlatform, PlatformOptions
from streamwarden.processes import group_members
from streamwarden.runfiles.lease import is_held, read_holder
from streamwarden.settings import Settings, load_settings

LONG_RUN_TIMEOUT = 1100.0  # 5 minutes of platform, up to 7 for its stop (the drain), the report
FIRST_BATCH_TIMEOUT = 600.0  # Airflow took 250 s to answer on a busy 2-core machine
EXIT_TIMEOUT = 200.0
FIRST_BATCH = "first batch committed to the Delta tables"

Seen = dict[tuple[int, float], str]


def _remember(seen: Seen, processes: list[psutil.Process]) -> None:
    for process in processes:
        try:
            seen[(process.pid, process.create_time())] = " ".join(process.cmdline()[:4])
        except psutil.NoSuchProcess:
            continue


def _still_running(seen: Seen) -> list[str]:
    alive = []
    for (pid, created), command in seen.items():
        try:
            process = psutil.Process(pid)
            if process.create_time() == created and process.status() != psutil.STATUS_ZOMBIE:
                alive.append(f"{pid} {command}")
        except psutil.NoSuchProcess:
            continue
    return alive


def _env(home: Path) -> dict[str, str]:
    """This environment without the test session's Airflow and Streamwarden variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "STREAMWARDEN_"))}
    env["STREAMWARDEN_HOME"] = str(home)
    return env


def test_a_second_up_on_the_same_home_is_refused(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path / "home")
    settings.home.mkdir()
    with open(settings.home_paths.up_lock, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running `up` holds it
        done = subprocess.run([sys.executable, "-m", "streamwarden", "up", "--headless"], cwd=REPO,
                              env=_env(settings.home), capture_output=True, text=True, timeout=120)
    assert done.returncode == EXIT_ALREADY_RUNNING, done.stderr
    assert "another `streamwarden up`" in done.stderr


def test_up_rolls_over_a_full_component_log_and_prunes_past_the_count(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path / "home", log_max_bytes=1024, log_backups=2)
    options = PlatformOptions(headless=True, api_port=0, producer_rate=1.0, broker_memory_limit=2**30)
    platform = LocalPlatform(settings, options, REPO)
    platform.logs.mkdir(parents=True)
    (platform.logs / "producer.log.3").write_text("left by a run with more backups")
    log = platform.logs / "producer.log"
    with open(log, "ab") as out:  # appended to, as up's components write their logs
        platform.producer = subprocess.Popen(
            [sys.executable, "-c", "import sys, time; print('x' * 2000, end='', flush=True); time.sleep(30)"],
            stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while log.stat().st_size < 2000 and time.monotonic() < deadline:
            time.sleep(0.1)
        platform._roll_logs()
    finally:
        platform.producer.kill()
        platform.producer.wait()
    assert (log.stat().st_size, (platform.logs / "producer.log.1").read_text()) == (0, "x" * 2000)
    assert sorted(p.name for p in platform.logs.iterdir()) == ["producer.log", "producer.log.1"]


class _Up:
    """One ``streamwarden up --headless`` on a home, its output in a file, and every process seen under it."""

    def __init__(self, settings: Settings, output: Path, seen: Seen, extra: dict[str, str] | None = None) -> None:
        self.settings = settings
        self.output = output
        self.seen = seen
        self.started = datetime.now(UTC)
        self.began = time.monotonic()
        with open(output, "wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "streamwarden", "up", "--headless"], cwd=REPO,
                env={**_env(settings.home), **(extra or {})}, stdout=out, stderr=subprocess.STDOUT)

    def log(self) -> str:
        return self.output.read_text()

    def wait_for_first_batch(self) -> float:
        """Seconds until ``up`` says this platform committed its first batch; every process seen meanwhile is
        remembered (the stream's group too)."""
        me = psutil.Process(self.process.pid)
        while FIRST_BATCH not in self.log():
            assert self.process.poll() is None, f"up exited early:\n{self.log()}"
            assert time.monotonic() - self.began < FIRST_BATCH_TIMEOUT, f"no first batch yet:\n{self.log()}"
            self.remember(me)
            time.sleep(2)
        self.remember(me)
        return time.monotonic() - self.began

    def remember(self, me: psutil.Process) -> None:
        _remember(self.seen, me.children(recursive=True))
        holder = read_holder(self.settings.lease_path)
        if holder is not None and is_held(self.settings.lease_path):
            _remember(self.seen, group_members(holder.pgid))

    def interrupt(self) -> int:
        self.process.send_signal(signal.SIGINT)
        return self.process.wait(EXIT_TIMEOUT)

    def api(self) -> AirflowApi:
        url, password = re.findall(r"Airflow UI\s+(\S+)\s+\(user 'admin', password '([^']+)'\)", self.log())[-1]
        api = AirflowApi(url)
        api.login("admin", password)
        return api

    def red_runs(self) -> list[str]:
        """Failed runs of this platform (the previous one's, ended when this one started, are earlier)."""
        status, document = self.api().call(
            "GET", f"/api/v2/dags/~/dagRuns?state=failed&limit=100&run_after_gte={quote(self.started.isoformat())}")
        assert status == 200, document
        return [f"{run['dag_id']}/{run['dag_run_id']}" for run in document["dag_runs"]]


SIBLING_SETTINGS = {"STREAMWARDEN_WARDEN_LAG_WINDOW": "11", "STREAMWARDEN_MAINTENANCE_MIN_FILES": "6",
                    "STREAMWARDEN_VALIDATION_BROKER_TIMEOUT": "11", "STREAMWARDEN_SESSION_RESTART_POKE_INTERVAL": "31"}
"""One setting of each sibling, given to ``up`` (none of them changes what the drill sees)."""


def _airflow_environments(up_pid: int) -> dict[str, dict[str, str]]:
    """The environment of each of ``up``'s Airflow components whose ``/proc/<pid>/environ`` still reads as one
    (a process that renamed itself with setproctitle shows its title there instead)."""
    found = {}
    for process in psutil.Process(up_pid).children(recursive=True):
        try:
            command, environ = " ".join(process.cmdline()[:3]), process.environ()
        except psutil.Error:
            continue
        if "airflow" in command and "STREAMWARDEN_HOME" in environ:
            found[f"{process.pid} {command}"] = environ
    return found


def _first_commit_time(settings: Settings) -> datetime:
    history = DeltaTable(str(settings.root("output") / "session_rows")).history()
    return datetime.fromtimestamp(min(entry["timestamp"] for entry in history) / 1000, UTC)


def _says_the_run_is_new(up: _Up) -> None:
    """Its first batch is its own, and nothing held it: no escalation, no red run."""
    settings = up.settings
    assert _first_commit_time(settings) >= up.started, up.log()
    assert [a for a in read_alerts(settings.run_paths.alerts) if a["severity"] == "critical"] == [], up.log()
    assert up.red_runs() == [], up.log()
    assert json.loads((settings.run_paths.platform).read_text())["pid"] == up.process.pid


@dataclass(frozen=True)
class FirstRun:
    """The long run's 5 minutes on a fresh home, and what was seen of its platform while it ran."""

    home: Path
    results: Path  # the run's results folder: samples.jsonl, summary.json, report.md, up.log
    output: str  # the long-run program's own output
    components: dict[str, dict[str, str]]  # the environment of each of Airflow's components
    lease_held: bool  # the stream's lease was seen held


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> FirstRun:
    """``make test``'s 5-minute long run (``make longrun``'s program, without the burn: the suite's other worker
    has the second core): ``up`` on a fresh home, given one setting of each sibling, sampled, stopped with
    SIGINT. While it runs, its Airflow components' environments and the stream's lease are looked at."""
    folder = tmp_path_factory.mktemp("first-run")
    home = folder / "home"
    settings = load_settings(home=home)
    env = {**_env(home), **SIBLING_SETTINGS, "PYTHONPATH": str(REPO / "bench")}
    command = [sys.executable, "-m", "streamwarden_longrun", "--minutes", "5", "--burn-cores", "0",
               "--results-dir", str(folder / "results"), "--home", str(home)]
    components: dict[str, dict[str, str]] = {}
    lease_held = False
    with open(folder / "longrun.out", "wb") as out:
        run = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + LONG_RUN_TIMEOUT
        while run.poll() is None:
            assert time.monotonic() < deadline, (folder / "longrun.out").read_text()
            platform = settings.run_paths.platform
            if not _has_every_component(components) and platform.is_file():
                with contextlib.suppress(ValueError, psutil.Error):
                    components = _airflow_environments(json.loads(platform.read_text())["pid"])
            holder = read_holder(settings.lease_path)
            lease_held = lease_held or (holder is not None and is_held(settings.lease_path))
            time.sleep(2)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        kill_leftovers(home)
    output = f"exit {run.returncode}\n{(folder / 'longrun.out').read_text()[-3000:]}"
    assert (folder / "results").is_dir(), output
    (results,) = (folder / "results").iterdir()
    return FirstRun(home, results, output, components, lease_held)


def _has_every_component(components: dict[str, dict[str, str]]) -> bool:
    return any("airflow scheduler" in c for c in components) and any("triggerer" in c for c in components)


@pytest.mark.slow
def test_a_five_minute_long_run_samples_every_role_and_ends_with_no_death_no_red_run_and_nothing_left(
        first_run: FirstRun) -> None:
    folder = first_run.results
    report = (folder / "report.md").read_text() if (folder / "report.md").exists() else "(no report)"
    context = f"{first_run.output}\n{report}"
    for name in ("samples.jsonl", "summary.json", "report.md", "timeline.png", "up.log"):
        assert (folder / name).stat().st_size > 0, f"{name} missing or empty\n{context}"
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["platform_exited"] is None, context
    assert summary["stream"]["deaths"] == [], context
    assert summary["red_runs"] == [], context
    assert summary["stream"]["commits"] >= 1, context
    sampled = {role["role"] for role in summary["roles"]}
    assert set(EXPECTED_ROLES) <= sampled and summary["roles_missing"] == [], context
    assert summary["stop"] == summary["stop"] | {"exit_code": 0, "killed": False}, context
    assert summary["leftovers"] == [], context
    assert summary["verdict"] in ("pass", "incomplete"), context  # incomplete: memory not judged in 5 minutes
    events = [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]
    ended = {e["detail"]["ti_id"] for e in events if e.get("type") == "task_ended"}
    named = {ti: name for e in events if e.get("type") == "task_names" for ti, name in e["detail"]["names"].items()}
    assert ended and ended <= set(named), context  # every task's process followed, and named: its DAG task
    assert any(named[ti].startswith("stream_supervisor.") for ti in ended), context


@pytest.mark.slow
def test_up_gives_airflow_the_siblings_settings_and_drains_the_stream_on_sigint(first_run: FirstRun) -> None:
    up_log = (first_run.results / "up.log").read_text()
    components = first_run.components  # the siblings' settings reach the processes running their DAGs
    assert _has_every_component(components), first_run.output
    assert {c: {k: e.get(k) for k in SIBLING_SETTINGS} for c, e in components.items()} == {
        c: SIBLING_SETTINGS for c in components}
    assert first_run.lease_held, up_log
    assert "archived the previous run" not in up_log
    assert "stream: drained" in up_log, up_log
    assert not is_held(load_settings(home=first_run.home).lease_path)


@pytest.mark.slow
@pytest.mark.timeout(2400)  # two platforms: 5-8 minutes on 2 cores, about 17 on a busy one
def test_up_starts_anew_after_sigint_and_after_kill_9(first_run: FirstRun, tmp_path: Path) -> None:
    home = first_run.home  # the long run's, stopped with SIGINT
    settings = load_settings(home=home)
    seen: Seen = {}
    ups: list[_Up] = []
    first_batch_s = []
    try:
        # 1. Again after Ctrl-C: the previous run's state archived, a first batch of its own.
        ups.append(second := _Up(settings, tmp_path / "up-2.out", seen))
        first_batch_s.append(second.wait_for_first_batch())
        [archived] = (home / "archive").iterdir()
        assert f"archived the previous run's checkpoint, output, state, run to {archived}" in second.log()
        assert (archived / "run" / "warden" / "restarts.json").is_file()  # the breaker's history went with it
        _says_the_run_is_new(second)

        # 2. Again after a kill -9 of `up` alone: what it left running is killed, a first batch of its own.
        left = [p for p in psutil.Process(second.process.pid).children(recursive=True)]
        second.process.kill()
        second.process.wait()
        ups.append(third := _Up(settings, tmp_path / "up-3.out", seen))
        first_batch_s.append(third.wait_for_first_batch())
        assert [p.pid for p in left if p.is_running() and p.status() != psutil.STATUS_ZOMBIE] == [], third.log()
        assert len(list((home / "archive").iterdir())) == 2
        _says_the_run_is_new(third)
        assert third.interrupt() == 0, third.log()
    finally:
        for up in ups:  # a failed test must not leave the broker, producer, Airflow or the stream behind
            if up.process.poll() is None:
                up.process.kill()
                up.process.wait()
        kill_leftovers(home)
    print(*(f"--- up {n}\n{up.log()}" for n, up in enumerate(ups, 2)),
          f"first batch after {', '.join(f'{s:.0f}' for s in first_batch_s)} s", sep="\n")
    assert _still_running(seen) == [], third.log()
    assert not is_held(settings.lease_path)
    assert (home / "airflow" / "simple_auth_manager_passwords.json.generated").is_file()
    assert home.stat().st_mode & 0o777 == 0o700
    shared = [f"{oct(p.stat().st_mode & 0o777)} {p}" for p in home.rglob("*")
              if p.is_file() and not p.is_symlink() and p.stat().st_mode & 0o077]
    assert shared == [], "files readable by others under the home:\n" + "\n".join(shared[:20])
