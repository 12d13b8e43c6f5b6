"""``streamwarden up``: the whole local platform in the foreground, stopped cleanly by Ctrl-C.

It runs a Kafka-protocol broker (Tansu) on a free loopback port, the demo producer, and ``airflow
standalone`` with this repository's DAGs and plugins. It does not start the stream itself: the
``stream_supervisor`` DAG does (``up`` only triggers a first run instead of waiting for the schedule).

On Ctrl-C or SIGTERM it stops, in order: the producer, Airflow (SIGINT, the only signal it stops
cleanly on), the stream (drain, then signals), the broker. ``up`` makes itself the child subreaper, so
the stream, started by an Airflow task that has since exited, is still its descendant, and a final
sweep leaves no process behind.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import webbrowser
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import psutil

from streamwarden.failures import EXIT_ALREADY_RUNNING, EXIT_CODES, FailureClass
from streamwarden.local.broker import LOOPBACK, LocalBroker, free_port
from streamwarden.logs.bounds import LogBounds
from streamwarden.logs.pruning import prune_logs
from streamwarden.logs.rolling import roll_if_full
from streamwarden.processes import group_members
from streamwarden.settings import Settings
from streamwarden.tables.location import RECORDS, SESSION_ROWS, TableLocation
from streamwarden.warden.launcher import REPO_ENV, log_tail, repo_root, stream_env, venv_bin
from streamwarden.warden.status import read_status
from streamwarden.warden.stop import LIFECYCLE_POOL, StopFailedError, stop_stream

SUPERVISOR_DAG = "stream_supervisor"
AIRFLOW_BOOT_TIMEOUT = 300.0
DAG_PARSE_TIMEOUT = 180.0
_PR_SET_CHILD_SUBREAPER = 36


class PlatformError(RuntimeError):
    """A component failed to start or died while the platform ran."""


@dataclass(frozen=True)
class PlatformOptions:
    headless: bool
    api_port: int
    producer_rate: float


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``up`` command's options."""
    parser.add_argument("--headless", action="store_true",
                        help="no browser and no periodic status lines (tests, CI)")
    parser.add_argument("--api-port", type=int, default=0,
                        help="Airflow UI/API port on 127.0.0.1 (default: a free port)")
    parser.add_argument("--producer-rate", type=float, default=2000.0,
                        help="demo producer messages per second (default %(default)s)")


def run_platform(settings: Settings, args: argparse.Namespace) -> int:
    """Run until Ctrl-C/SIGTERM (exit 0) or until a component dies (ENVIRONMENT exit code)."""
    options = PlatformOptions(args.headless, args.api_port, args.producer_rate)
    return LocalPlatform(settings, options, repo_root()).run()


class AirflowApi:
    """The few calls of Airflow's REST API ``up`` needs (standard library HTTP, JSON bodies)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.token: str | None = None

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        """``(status, parsed JSON or None)``; HTTP errors are returned, connection errors raised."""
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base_url + path, data=data, headers=headers, method=method)
        for attempt in range(1, 6):  # SQLite under the scheduler's writes: "database is locked" -> 500
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    status, text = response.status, response.read()
            except urllib.error.HTTPError as exc:
                status, text = exc.code, exc.read()
            if status < 500:
                break
            time.sleep(attempt)
        try:
            return status, json.loads(text) if text else None
        except json.JSONDecodeError:
            return status, None

    def healthy(self) -> bool:
        try:
            return self.call("GET", "/api/v2/monitor/health")[0] == 200
        except OSError:
            return False

    def login(self, username: str, password: str) -> None:
        status, document = self.call("POST", "/auth/token", {"username": username, "password": password})
        if status not in (200, 201) or not isinstance(document, dict):
            raise PlatformError(f"Airflow login as {username!r} failed (HTTP {status}): {document}")
        self.token = document["access_token"]

    def ensure_pool(self, name: str, slots: int, description: str) -> None:
        status, pool = self.call("GET", f"/api/v2/pools/{name}")
        if status == 404:
            status, pool = self.call("POST", "/api/v2/pools",
                                     {"name": name, "slots": slots, "description": description})
            if status == 409:  # created by an attempt whose response was an error
                status, pool = self.call("GET", f"/api/v2/pools/{name}")
        elif status == 200 and pool["slots"] != slots:
            status, pool = self.call("PATCH", f"/api/v2/pools/{name}", {"slots": slots})
        if status not in (200, 201):
            raise PlatformError(f"could not create the Airflow pool {name!r} (HTTP {status}): {pool}")

    def dag(self, dag_id: str) -> dict[str, Any] | None:
        status, document = self.call("GET", f"/api/v2/dags/{dag_id}")
        return document if status == 200 and isinstance(document, dict) else None

    def import_errors(self) -> list[str]:
        status, document = self.call("GET", "/api/v2/importErrors")
        if status != 200 or not isinstance(document, dict):
            return []
        return [f"{e.get('filename')}: {e.get('stack_trace')}" for e in document.get("import_errors", [])]

    def unpause_and_trigger(self, dag_id: str, conf: dict[str, Any]) -> str:
        """Unpause the DAG (a person may have paused it in an earlier session) and start a run."""
        status, document = self.call("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
        if status != 200:
            raise PlatformError(f"could not unpause {dag_id} (HTTP {status}): {document}")
        status, document = self.call("POST", f"/api/v2/dags/{dag_id}/dagRuns",
                                     {"logical_date": None, "conf": conf})
        if status not in (200, 201) or not isinstance(document, dict):
            raise PlatformError(f"could not trigger {dag_id} (HTTP {status}): {document}")
        return str(document["dag_run_id"])


class LocalPlatform:
    """The processes of ``streamwarden up`` and the order they start and stop in."""

    def __init__(self, settings: Settings, options: PlatformOptions, repo: Path) -> None:
        self.settings = settings
        self.options = options
        self.repo = repo
        self.log_bounds = LogBounds.of(settings)
        self.logs = self.log_bounds.folder
        self.airflow_home = settings.home / "airflow"
        self.broker: LocalBroker | None = None
        self.producer: subprocess.Popen[bytes] | None = None
        self.airflow: subprocess.Popen[bytes] | None = None
        self.started = time.monotonic()

    # --- lifecycle -------------------------------------------------------------------------------------
    def run(self) -> int:
        self.settings.home.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.settings.home.chmod(0o700)  # the Airflow password, database, logs and alerts live below it
        self.logs.mkdir(parents=True, exist_ok=True)
        with open(self.settings.root("run") / "up.lock", "a+") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                print(f"streamwarden up: another `streamwarden up` runs with {self.settings.home}",
                      file=sys.stderr)
                return EXIT_ALREADY_RUNNING
            return self._run()

    def _run(self) -> int:
        _become_child_subreaper()
        # Even when started with SIGINT ignored (a background job of a script), Ctrl-C must stop `up`;
        # a handler (unlike SIG_IGN) is also reset to the default in every child.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        previous = signal.signal(signal.SIGTERM, _interrupt) or signal.SIG_DFL
        code = 0
        try:
            self._start()
            self._watch()
        except KeyboardInterrupt:
            self._say("stopping (Ctrl-C again is ignored; every step has a time limit) ...")
        except PlatformError as exc:
            print(f"streamwarden up: {exc}", file=sys.stderr, flush=True)
            code = EXIT_CODES[FailureClass.ENVIRONMENT]
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            try:
                self._stop()
            finally:
                signal.signal(signal.SIGINT, signal.default_int_handler)
                signal.signal(signal.SIGTERM, previous)
        return code

    def _start(self) -> None:
        prune_logs(self.log_bounds)
        self.broker = LocalBroker(log_path=self.logs / "broker.log").start()
        self.settings = self.settings.model_copy(update={"bootstrap_servers": self.broker.bootstrap_servers})
        self._say(f"broker (Tansu, in memory) on {self.broker.bootstrap_servers}")
        env = self._base_env()
        self.producer = _spawn(
            [sys.executable, "-m", "streamwarden", "produce", "--rate", f"{self.options.producer_rate:g}"],
            env, self.logs / "producer.log", cwd=self.settings.home)
        self._say(f"demo producer at {self.options.producer_rate:g} msg/s (log {self.logs / 'producer.log'})")

        port = self.options.api_port or free_port()
        base_url = f"http://{LOOPBACK}:{port}"
        self.airflow_home.mkdir(parents=True, exist_ok=True)
        self.airflow = _spawn([str(venv_bin() / "airflow"), "standalone"], self._airflow_env(env, port),
                              self.logs / "airflow.log", cwd=self.airflow_home)
        self._say(f"airflow standalone starting (log {self.logs / 'airflow.log'}) ...")
        api = AirflowApi(base_url)
        self._wait("the Airflow API", api.healthy, AIRFLOW_BOOT_TIMEOUT)
        username, password = self._wait_for_login()
        api.login(username, password)
        self._say(f"Airflow API ready after {self._elapsed():.0f}s")
        api.ensure_pool(LIFECYCLE_POOL, 1, "Streamwarden stream start/stop: one at a time")
        self._wait(f"the {SUPERVISOR_DAG} DAG", lambda: api.dag(SUPERVISOR_DAG) is not None,
                   DAG_PARSE_TIMEOUT, on_timeout=lambda: "\n".join(api.import_errors()))
        run_id = api.unpause_and_trigger(SUPERVISOR_DAG, {"reason": "streamwarden up"})
        self._say(f"triggered {SUPERVISOR_DAG} ({run_id}); it starts the stream")
        print("\n".join([
            "",
            f"  Airflow UI     {base_url}  (user {username!r}, password {password!r})",
            f"  Delta tables   {self.settings.output_location}  (list them: streamwarden tables)",
            f"  Logs           {self.logs}",
            "  Stop           Ctrl-C (drains the stream, then stops everything)",
            "",
        ]), flush=True)
        if not self.options.headless and _has_display():
            webbrowser.open(base_url)

    def _watch(self) -> None:
        """Until interrupted: fail when a component dies, report stream changes and the first output."""
        running_pid: int | None = None
        first_output = False
        last_line = time.monotonic()
        while True:
            time.sleep(1.0)
            for name, process in self._components():
                code = process.poll()
                if code is not None:
                    log = self.logs / f"{name}.log"
                    raise PlatformError(f"{name} exited with code {code}; last lines of {log}:\n"
                                        f"{log_tail(log)}")
            _reap_adopted({p.pid for _, p in self._components()})
            self._roll_logs()
            status = read_status(self.settings)
            if status.pid != running_pid:
                if status.pid is not None:
                    self._say(f"stream running as pid {status.pid}")
                else:
                    failure = status.last_failure or {}
                    self._say(f"stream stopped (last failure: {failure.get('failure_class', 'none')}); "
                              f"the supervisor DAG restarts it")
                running_pid = status.pid
            if not first_output and _first_commit(self.settings):
                first_output = True
                self._say(f"first batch committed to the Delta tables under {self.settings.output_location}")
            if not self.options.headless and time.monotonic() - last_line >= 60:
                last_line = time.monotonic()
                self._say(f"stream {'running' if status.running else 'not running'}, last batch "
                          f"{status.last_batch_id}, heartbeat {status.heartbeat_age_s}s old")

    def _stop(self) -> None:
        if self.producer is not None:
            _stop_process(self.producer, "producer", signal.SIGINT, grace=10)
        if self.airflow is not None:
            _stop_process(self.airflow, "airflow", signal.SIGINT, grace=60)
            _stop_group(self.airflow.pid, grace=10)
        try:
            outcome = stop_stream(self.settings, drain_timeout=90, term_timeout=20)
            self._say(f"stream: {outcome.method.value} ({outcome.seconds:.1f}s)")
        except StopFailedError as exc:
            self._say(f"stream: {exc}")
        if self.broker is not None:
            self.broker.stop()
        leftovers = _live_descendants()
        if leftovers:
            self._say(f"terminating leftover processes: {[p.pid for p in leftovers]}")
            _terminate(leftovers, grace=10)
        _reap_adopted(set())
        self._say("stopped")

    # --- helpers ---------------------------------------------------------------------------------------
    def _roll_logs(self) -> None:
        """Roll over each component's log that reached its size bound; then prune what is past the bounds."""
        rolled = [roll_if_full(self.logs / f"{name}.log", self.log_bounds) for name, _ in self._components()]
        if any(rolled):
            prune_logs(self.log_bounds)

    def _components(self) -> list[tuple[str, subprocess.Popen[bytes]]]:
        found = [("broker", self.broker.process if self.broker else None), ("producer", self.producer),
                 ("airflow", self.airflow)]
        return [(name, process) for name, process in found if process is not None]

    def _base_env(self) -> dict[str, str]:
        """The stream's environment (the platform's settings, this venv first) plus where the checkout is."""
        return {**stream_env(self.settings), REPO_ENV: str(self.repo)}

    def _airflow_env(self, base: dict[str, str], port: int) -> dict[str, str]:
        spark_connection = {"conn_type": "spark", "host": self.settings.spark_master}
        return {
            **base,
            "AIRFLOW_HOME": str(self.airflow_home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.repo / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(self.repo / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__API__HOST": LOOPBACK,
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__BASE_URL": f"http://{LOOPBACK}:{port}",
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(spark_connection),
        }

    def _wait_for_login(self) -> tuple[str, str]:
        path = self.airflow_home / "simple_auth_manager_passwords.json.generated"
        self._wait(f"{path.name}", path.is_file, 60)
        users: dict[str, str] = json.loads(path.read_text())
        username = "admin" if "admin" in users else next(iter(users))
        return username, users[username]

    def _wait(self, what: str, ready: Callable[[], bool], timeout: float,
              on_timeout: Callable[[], str] | None = None) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if self.airflow is not None and self.airflow.poll() is not None:
                log = self.logs / "airflow.log"
                raise PlatformError(f"airflow standalone exited with code {self.airflow.returncode} "
                                    f"while waiting for {what}; last lines of {log}:\n{log_tail(log)}")
            if time.monotonic() > deadline:
                detail = on_timeout() if on_timeout else ""
                suffix = f":\n{detail}" if detail else ""
                raise PlatformError(f"{what} not ready after {timeout:.0f}s{suffix}")
            time.sleep(1.0)

    def _elapsed(self) -> float:
        return time.monotonic() - self.started

    def _say(self, message: str) -> None:
        print(f"[up {self._elapsed():6.1f}s] {message}", flush=True)


def _spawn(command: list[str], env: dict[str, str], log_path: Path, cwd: Path) -> subprocess.Popen[bytes]:
    """A child in its own session (terminal Ctrl-C reaches only ``up``, which stops children in order)."""
    cwd.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                env=env, cwd=cwd, start_new_session=True)


def _stop_process(process: subprocess.Popen[bytes], name: str, first: signal.Signals, grace: float) -> None:
    """``first`` signal, then SIGTERM, then SIGKILL, each given ``grace`` seconds."""
    for sig in (first, signal.SIGTERM, signal.SIGKILL):
        if process.poll() is not None:
            return
        if sig != first:
            print(f"[up] {name} still running; sending {sig.name}", flush=True)
        process.send_signal(sig)
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            continue


def _stop_group(pgid: int, grace: float) -> None:
    """Terminate what is left of a process group (Airflow's components after ``standalone`` exited)."""
    _terminate(group_members(pgid), grace)


def _terminate(processes: list[psutil.Process], grace: float) -> None:
    for process in processes:
        try:
            process.terminate()
        except psutil.NoSuchProcess:
            continue
    _, alive = psutil.wait_procs(processes, timeout=grace)
    for process in alive:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            continue
    psutil.wait_procs(alive, timeout=grace)


def _live_descendants() -> list[psutil.Process]:
    found = []
    for process in psutil.Process().children(recursive=True):
        try:
            if process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except psutil.NoSuchProcess:
            continue
    return found


def _reap_adopted(own: set[int]) -> None:
    """Reap exited orphans adopted as child subreaper (never the children ``up`` started itself)."""
    for child in psutil.Process().children():
        if child.pid in own:
            continue
        try:
            os.waitpid(child.pid, os.WNOHANG)
        except ChildProcessError:
            continue


def _become_child_subreaper() -> None:
    """Orphaned descendants (the stream, once its launching task exits) are re-parented to ``up``."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _first_commit(settings: Settings) -> bool:
    """The stream has committed a batch with rows to ``session_rows`` (or ``records``)."""
    location = TableLocation.of(settings, RECORDS if settings.pipeline == "records" else SESSION_ROWS)
    table = location.open_or_none()
    return table is not None and bool(table.file_uris())


def _has_display() -> bool:
    return sys.platform == "darwin" or bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt
