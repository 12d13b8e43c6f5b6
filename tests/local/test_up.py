"""End to end: ``streamwarden up --headless`` brings broker, producer and Airflow up, the supervisor DAG
starts the real stream, Parquet lands, and SIGINT leaves no process and no lease behind."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from deltalake import DeltaTable

from streamwarden.failures import EXIT_ALREADY_RUNNING
from streamwarden.local.up import LocalPlatform, PlatformOptions
from streamwarden.processes import group_members
from streamwarden.runfiles.lease import is_held, read_holder
from streamwarden.settings import load_settings

REPO = Path(__file__).resolve().parents[2]
PARQUET_TIMEOUT = 300.0
EXIT_TIMEOUT = 200.0

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
    lock_path = settings.root("run") / "up.lock"
    lock_path.parent.mkdir(parents=True)
    with open(lock_path, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running `up` holds it
        done = subprocess.run([sys.executable, "-m", "streamwarden", "up", "--headless"], cwd=REPO,
                              env=_env(settings.home), capture_output=True, text=True, timeout=120)
    assert done.returncode == EXIT_ALREADY_RUNNING, done.stderr
    assert "another `streamwarden up`" in done.stderr


def test_up_rolls_over_a_full_component_log_and_prunes_past_the_count(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path / "home", log_max_bytes=1024, log_backups=2)
    platform = LocalPlatform(settings, PlatformOptions(headless=True, api_port=0, producer_rate=1.0), REPO)
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


@pytest.mark.slow
def test_up_runs_the_platform_and_stops_cleanly(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = _env(home)
    settings = load_settings(home=home)
    output = tmp_path / "up.out"
    started = time.monotonic()
    with open(output, "wb") as out:
        up = subprocess.Popen([sys.executable, "-m", "streamwarden", "up", "--headless", "--producer-rate", "1000"],
                              cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    seen: Seen = {}
    parquet: str | None = None
    try:
        up_process = psutil.Process(up.pid)
        while parquet is None:
            assert up.poll() is None, f"up exited early:\n{output.read_text()}"
            assert time.monotonic() - started < PARQUET_TIMEOUT, f"no Parquet yet:\n{output.read_text()}"
            _remember(seen, up_process.children(recursive=True))
            holder = read_holder(settings.lease_path)
            if holder is not None and is_held(settings.lease_path):
                _remember(seen, group_members(holder.pgid))
            table = settings.root("output") / "session_rows"
            parquet = next(iter(DeltaTable(str(table)).file_uris()), None) if (table / "_delta_log").is_dir() else None
            time.sleep(2)
        first_parquet_s = time.monotonic() - started
        _remember(seen, up_process.children(recursive=True))
        stream_holder = read_holder(settings.lease_path)
        assert stream_holder is not None and is_held(settings.lease_path)
        _remember(seen, group_members(stream_holder.pgid))

        up.send_signal(signal.SIGINT)
        code = up.wait(EXIT_TIMEOUT)
    finally:
        if up.poll() is None:  # a failed test must not leave the broker, producer or Airflow behind
            for child in psutil.Process(up.pid).children(recursive=True):
                child.kill()
            up.kill()
            up.wait()
    log = output.read_text()
    print(log, f"\nfirst Parquet after {first_parquet_s:.0f}s", sep="")
    assert code == 0, log
    assert "stream: drained" in log, log
    assert any("spark" in command.lower() for command in seen.values()), seen
    assert _still_running(seen) == [], log
    assert not is_held(settings.lease_path)
    assert (home / "airflow" / "simple_auth_manager_passwords.json.generated").is_file()
    assert home.stat().st_mode & 0o777 == 0o700
    shared = [f"{oct(p.stat().st_mode & 0o777)} {p}" for p in home.rglob("*")
              if p.is_file() and not p.is_symlink() and p.stat().st_mode & 0o077]
    assert shared == [], "files readable by others under the home:\n" + "\n".join(shared[:20])
