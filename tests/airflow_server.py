"""A real Airflow for end-to-end tests: ``airflow standalone`` (scheduler, API server, DAG processor, triggerer)
on a free loopback port, with this repository's DAGs and plugins, in its own ``AIRFLOW_HOME``.

    with AirflowServer(tmp_path / "airflow", stream_env) as airflow:   # started: comes up in the background
        ...                                                             # (do other slow things meanwhile)
        airflow.ready("stream_supervisor")                              # logged in, pool made, DAGs parsed
        run_id = airflow.trigger("stream_supervisor", {"reason": "e2e"})
        run = airflow.wait_run("stream_supervisor", run_id, 300)

The DAGs' tasks see ``env``'s ``STREAMWARDEN_*`` settings (the stream under test); no ``AIRFLOW*`` variable of
``env`` leaks in. Only the runs a test triggers run (``use_job_schedule`` off).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote

from streamwarden.local.broker import free_port
from streamwarden.local.up import AirflowApi
from streamwarden.processes import group_members
from streamwarden.warden.launcher import REPO_ENV, venv_bin
from streamwarden.warden.stop import LIFECYCLE_POOL

REPO = Path(__file__).resolve().parents[1]
ENDED = ("success", "failed")


def airflow_env(home: Path, port: int, base: dict[str, str], **extra: str) -> dict[str, str]:
    """``base`` (the stream's settings) without its ``AIRFLOW*`` variables, plus a standalone Airflow's."""
    env = {k: v for k, v in base.items() if not k.startswith("AIRFLOW")}
    env.update({
        "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False", "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",  # only the runs a test triggers
        # The DAG files do not change during a test: parsed at the start, not every 30 s (3 s of CPU a parse of
        # the six files on a busy machine). A test needing asset watchers passes 30 (see the watch drill).
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "600",
        "AIRFLOW__API__HOST": "127.0.0.1", "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}", "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "STREAMWARDEN_WARDEN_POKE_INTERVAL": "2s", "STREAMWARDEN_WARDEN_HEARTBEAT_FLOOR": "60s",
        REPO_ENV: str(REPO), "PATH": os.pathsep.join([str(venv_bin()), base.get("PATH", os.environ.get("PATH", ""))]),
    })
    env.update(extra)
    return env


def _answered(predicate: Callable[[], bool]) -> bool:
    """``predicate()``, False when its request to the API timed out (an HTTP error is raised as it is)."""
    try:
        return predicate()
    except TimeoutError:
        return False
    except urllib.error.URLError as exc:
        if isinstance(exc, urllib.error.HTTPError) or not isinstance(exc.reason, TimeoutError):
            raise
        return False


def _signal_group(pgid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signum)


class AirflowServer:
    """``airflow standalone`` in its own process group; a context manager that stops all of it on leaving."""

    def __init__(self, home: Path, env: dict[str, str], **extra_env: str) -> None:
        self.home = home
        self.port = free_port()
        self.env = airflow_env(home, self.port, env, **extra_env)
        self.log = home.parent / f"{home.name}.log"
        self.api = AirflowApi(f"http://127.0.0.1:{self.port}")
        self.process: subprocess.Popen[bytes] | None = None

    # -- the process

    def start(self) -> AirflowServer:
        self.home.mkdir(parents=True, exist_ok=True)
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen([str(venv_bin() / "airflow"), "standalone"], env=self.env, stdout=out,
                                            stderr=subprocess.STDOUT, cwd=self.home, start_new_session=True)
        return self

    def stop(self) -> None:
        """SIGINT (standalone stops its components), SIGTERM to its process group after 15 s, then whatever is
        left of the group is killed. (Standalone seldom ends on SIGINT alone while a task runs: waiting for it
        was up to 90 s of a test's teardown, and nothing is checked after the stop.)"""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                _signal_group(self.process.pid, signal.SIGTERM)
                try:
                    self.process.wait(15)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
        for process in group_members(self.process.pid):
            process.kill()

    def __enter__(self) -> AirflowServer:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def log_tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else "(no log)"

    def task_logs(self, dag_id: str, run_id: str, task_id: str, chars: int = 6000) -> str:
        """The tail of every attempt's log of one task (under ``$AIRFLOW_HOME/logs``), for a failure message."""
        folder = self.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
        files = sorted(folder.rglob("*.log")) if folder.is_dir() else []
        tails = [f"== {f.name}\n{f.read_text(errors='replace')[-chars:]}" for f in files]
        return "\n".join(tails) or f"(no log in {folder})"

    def parked(self, dag_id: str, run_id: str, task_id: str) -> bool:
        """Whether the scheduler has seen the worker of ``task_id`` exit after parking it (``awaiting_input``).

        Airflow 3.3 races an answer given before that: the answer re-queues the task, the parking worker's
        late "success" then finds it queued and the scheduler marks it failed ("state changed externally").
        The scheduler's log is the only place that shows the exit was processed."""
        line = f"TaskInstance Finished: dag_id={dag_id}, task_id={task_id}, run_id={run_id}, "
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return any("state=awaiting_input" in row for row in text.splitlines() if line in row)

    def wait(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        """Poll ``predicate`` every second; AssertionError with the log's tail on timeout or if Airflow exited. A
        poll whose request timed out (a busy API server) is one more poll, not the answer."""
        deadline = time.monotonic() + timeout
        while not _answered(predicate):
            if self.process is not None and self.process.poll() is not None:
                raise AssertionError(f"airflow standalone exited ({self.process.returncode}) while waiting for "
                                     f"{what}; log:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}; log:\n{self.log_tail()}")
            time.sleep(1)

    # -- the API

    def ready(self, *dag_ids: str, timeout: float = 240) -> AirflowApi:
        """Wait for the API server, log in as the generated admin, make the ``stream_lifecycle`` pool, and wait
        until ``dag_ids`` are parsed. Returns the logged-in API."""
        passwords = self.home / "simple_auth_manager_passwords.json.generated"
        self.wait(lambda: passwords.is_file() and self.api.healthy(), timeout, "the API server")
        self.api.login("admin", json.loads(passwords.read_text())["admin"])
        self.api.ensure_pool(LIFECYCLE_POOL, 1, "Streamwarden start/stop")
        for dag_id in dag_ids:
            self.wait(lambda d=dag_id: self.api.dag(d) is not None, timeout, f"the DAG {dag_id} to be parsed")
        return self.api

    def trigger(self, dag_id: str, conf: dict[str, Any]) -> str:
        """Start a run of ``dag_id`` with ``conf``; its run id."""
        status, run = self.api.call("POST", f"/api/v2/dags/{quote(dag_id, safe='')}/dagRuns",
                                    {"logical_date": None, "conf": conf})
        assert status in (200, 201), (status, run)
        return str(run["dag_run_id"])

    def run_path(self, dag_id: str, run_id: str) -> str:
        return f"/api/v2/dags/{quote(dag_id, safe='')}/dagRuns/{quote(run_id, safe='')}"

    def run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        status, document = self.api.call("GET", self.run_path(dag_id, run_id))
        assert status == 200, (status, document)
        return dict(document)

    def wait_run(self, dag_id: str, run_id: str, timeout: float) -> dict[str, Any]:
        """Wait until the run ends (success or failed); the run as the API shows it."""
        self.wait(lambda: self.run(dag_id, run_id)["state"] in ENDED, timeout, f"{dag_id}/{run_id} to end")
        return self.run(dag_id, run_id)

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str | None]:
        status, document = self.api.call("GET", f"{self.run_path(dag_id, run_id)}/taskInstances?limit=100")
        assert status == 200, (status, document)
        return {t["task_id"]: t["state"] for t in document["task_instances"]}

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> Any:
        """A task's XCom value (deserialized), or None when it pushed none."""
        path = f"{self.run_path(dag_id, run_id)}/taskInstances/{quote(task_id, safe='')}/xcomEntries/" \
               f"{quote(key, safe='')}"
        status, document = self.api.call("GET", path)
        if status == 404:
            return None
        assert status == 200, (status, document)
        value = document["value"]
        if isinstance(value, str):  # stored as JSON text
            try:
                return json.loads(value)
            except json.JSONDecodeError:
                return value
        return value
