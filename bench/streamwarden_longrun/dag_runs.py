"""Red DAG runs and failed tasks, from Airflow's REST API (the client ``up`` itself uses).

A red run is a DAG run in state ``failed``. A failed task instance is reported on its own too: a run whose
step failed must never be green (issue 37: ``maintain_tables`` showed green while ``plan_compaction``
failed), and a failed task of a run that ends red is counted with that run, not twice.
"""

from __future__ import annotations

import json
import queue
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from streamwarden.local.up import AirflowApi

from .records import EventType
from .stream_watch import Noticed

PAGE = 100
PASSWORDS_FILE = "simple_auth_manager_passwords.json.generated"
_UNAUTHORIZED = (401, 403)


class ApiUnavailableError(RuntimeError):
    """The API answered with an error, or not at all."""


@dataclass
class DagRunWatch:
    """Looks for new failed runs and failed task instances."""

    base_url: str
    airflow_home: Path
    api: AirflowApi = field(init=False)
    red_runs: set[tuple[str, str]] = field(default_factory=set)
    failed_tasks: set[tuple[str, str, str, int, int]] = field(default_factory=set)
    _logged_in: bool = False

    def __post_init__(self) -> None:
        self.api = AirflowApi(self.base_url)

    def ready(self) -> bool:
        """The API answers and the admin password exists; logs in the first time."""
        if not self._logged_in:
            if not (self.airflow_home / PASSWORDS_FILE).is_file() or not self.api.healthy():
                return False
            self._login()
        return True

    def _users(self) -> dict[str, str]:
        users: dict[str, str] = json.loads((self.airflow_home / PASSWORDS_FILE).read_text())
        return users

    def _login(self) -> None:
        users = self._users()
        username = "admin" if "admin" in users else next(iter(users))
        self.api.login(username, users[username])
        self._logged_in = True

    def passwords(self) -> list[str]:
        """The generated passwords (to mask wherever they were printed); none before Airflow wrote them."""
        try:
            return list(self._users().values())
        except (OSError, ValueError):
            return []

    def _get(self, path: str, query: list[tuple[str, str | int]]) -> list[dict[str, Any]]:
        """Every page of a list endpoint (its items under the one key that holds a list)."""
        items: list[dict[str, Any]] = []
        offset = 0
        while True:
            url = f"{path}?{urlencode([*query, ('limit', PAGE), ('offset', offset)])}"
            status, document = self.api.call("GET", url)
            if status in _UNAUTHORIZED:  # the token expired: log in again, once
                self._login()
                status, document = self.api.call("GET", url)
            if status != 200 or not isinstance(document, dict):
                raise ApiUnavailableError(f"GET {path}: HTTP {status}: {str(document)[:300]}")
            page = next((value for value in document.values() if isinstance(value, list)), [])
            items += page
            offset += len(page)
            if not page or offset >= int(document.get("total_entries", 0)):
                return items

    def task_names(self) -> dict[str, str]:
        """Every task instance the API knows: its id -> ``dag_id.task_id``."""
        return {str(t["id"]): f"{t['dag_id']}.{t['task_id']}"
                for t in self._get("/api/v2/dags/~/dagRuns/~/taskInstances", []) if t.get("id")}

    def look(self) -> list[Noticed]:
        """New red runs (with their failed tasks) and new failed tasks of runs that are not red (yet)."""
        noticed: list[Noticed] = []
        for run in self._get("/api/v2/dags/~/dagRuns", [("state", "failed")]):
            key = (str(run["dag_id"]), str(run["dag_run_id"]))
            if key in self.red_runs:
                continue
            self.red_runs.add(key)
            tasks = self._get(f"/api/v2/dags/{quote(key[0], safe='')}/dagRuns/{quote(key[1], safe='')}"
                              "/taskInstances", [("state", "failed"), ("state", "upstream_failed")])
            noticed.append(Noticed(EventType.RED_RUN, {
                "dag_id": key[0], "run_id": key[1], "run_type": run.get("run_type"),
                "logical_date": run.get("logical_date"), "start_date": run.get("start_date"),
                "end_date": run.get("end_date"),
                "failed_tasks": sorted(f"{t['task_id']} ({t['state']})" for t in tasks)}))
        for task in self._get("/api/v2/dags/~/dagRuns/~/taskInstances", [("state", "failed")]):
            task_key = (str(task["dag_id"]), str(task["dag_run_id"]), str(task["task_id"]),
                        int(task.get("map_index", -1)), int(task.get("try_number", 0)))
            if task_key in self.failed_tasks:
                continue
            self.failed_tasks.add(task_key)
            noticed.append(Noticed(EventType.FAILED_TASK, {
                "dag_id": task_key[0], "run_id": task_key[1], "task_id": task_key[2], "try_number": task_key[4],
                "start_date": task.get("start_date"), "end_date": task.get("end_date")}))
        return noticed


class DagRunPoller:
    """Runs :meth:`DagRunWatch.look` every ``interval`` seconds in a thread of its own: on a busy machine the API
    answers in tens of seconds (its client waits 30 s a call, and retries a 5xx), which must not hold up the
    two-second looks at the processes and the stream. What it noticed is taken with :meth:`drain`."""

    def __init__(self, watch: DagRunWatch, interval: float) -> None:
        self.watch = watch
        self.interval = interval
        self._noticed: queue.Queue[Noticed] = queue.Queue()
        self._stop = threading.Event()
        self._last_look = False
        self._thread = threading.Thread(target=self._run, name="dag-run-poller", daemon=True)
        self._ready_noted = False
        self._down = False

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.poll()
        if self._last_look:
            self.poll()

    def poll(self) -> None:
        """One look; the API's first answer and each outage (not every failed look of it) are noticed too."""
        try:
            if not self.watch.ready():
                return
            if not self._ready_noted:
                self._ready_noted = True
                self._noticed.put(Noticed(EventType.API_READY, {}))
            for item in self.watch.look():
                self._noticed.put(item)
            self._down = False
        except (OSError, RuntimeError, ValueError, KeyError) as exc:
            if not self._down:
                self._down = True
                self._noticed.put(Noticed(EventType.API_ERROR, {"error": f"{type(exc).__name__}: {str(exc)[:500]}"}))

    def drain(self) -> list[Noticed]:
        found = []
        while not self._noticed.empty():
            found.append(self._noticed.get_nowait())
        return found

    def finish(self, last_look: bool) -> None:
        """Ask the thread to end after the look in progress, and with ``last_look`` to look once more first: runs
        that went red since its previous look. It does not wait: see :meth:`finished`."""
        self._last_look = last_look
        self._stop.set()

    def finished(self) -> bool:
        return not self._thread.is_alive()
