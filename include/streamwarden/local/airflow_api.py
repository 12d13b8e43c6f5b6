"""The few calls of Airflow's REST API ``streamwarden up`` needs (standard library HTTP, JSON bodies)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from datetime import datetime
from typing import Any
from urllib.parse import quote

TAG = "streamwarden"
"""The tag every Streamwarden DAG carries: the DAGs ``up`` pauses at its start and unpauses when Airflow is ready."""
UNFINISHED = ("queued", "running")


class AirflowApiError(RuntimeError):
    """Airflow answered a call ``up`` needs with an error."""


class AirflowApi:
    """Calls to one API server: its REST API (``/api/v2``) and the health of its execution API (``/execution``)."""

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

    def _answers(self, path: str) -> bool:
        try:
            return self.call("GET", path)[0] == 200
        except OSError:
            return False

    def healthy(self) -> bool:
        """The REST API answers and reports its components."""
        return self._answers("/api/v2/monitor/health")

    def execution_api_ready(self) -> bool:
        """The execution API answers: what every task's process calls to start, heartbeat and finish. A task
        that runs before it answers fails (connection refused) or is killed."""
        return self._answers("/execution/health")

    def login(self, username: str, password: str) -> None:
        status, document = self.call("POST", "/auth/token", {"username": username, "password": password})
        if status not in (200, 201) or not isinstance(document, dict):
            raise AirflowApiError(f"Airflow login as {username!r} failed (HTTP {status}): {document}")
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
            raise AirflowApiError(f"could not create the Airflow pool {name!r} (HTTP {status}): {pool}")

    def dag(self, dag_id: str) -> dict[str, Any] | None:
        status, document = self.call("GET", f"/api/v2/dags/{quote(dag_id, safe='')}")
        return document if status == 200 and isinstance(document, dict) else None

    def dags(self, tag: str | None = None) -> list[dict[str, Any]]:
        """The DAGs Airflow knows (not stale), with this tag when given."""
        query = f"&tags={quote(tag)}" if tag else ""
        return self._list(f"/api/v2/dags?limit=100{query}", "dags")

    def import_error_list(self) -> list[dict[str, Any]]:
        """Each DAG file that failed to import: ``filename``, ``timestamp``, ``stack_trace``."""
        return self._list("/api/v2/importErrors?limit=100", "import_errors")

    def import_errors(self) -> list[str]:
        """Each import error as ``file: trace``; none when the API cannot list them (a message is being built)."""
        try:
            found = self.import_error_list()
        except AirflowApiError:
            return []
        return [f"{e.get('filename')}: {e.get('stack_trace')}" for e in found]

    def set_paused(self, dag_id: str, paused: bool) -> None:
        status, document = self.call("PATCH", f"/api/v2/dags/{quote(dag_id, safe='')}", {"is_paused": paused})
        if status != 200:
            raise AirflowApiError(f"could not {'pause' if paused else 'unpause'} {dag_id} (HTTP {status}): "
                                  f"{document}")

    def trigger(self, dag_id: str, conf: dict[str, Any]) -> str:
        """Start a run now; its run id."""
        status, document = self.call("POST", f"/api/v2/dags/{quote(dag_id, safe='')}/dagRuns",
                                     {"logical_date": None, "conf": conf})
        if status not in (200, 201) or not isinstance(document, dict):
            raise AirflowApiError(f"could not trigger {dag_id} (HTTP {status}): {document}")
        return str(document["dag_run_id"])

    def unpause_and_trigger(self, dag_id: str, conf: dict[str, Any]) -> str:
        """Unpause the DAG (a person may have paused it in an earlier session) and start a run."""
        self.set_paused(dag_id, False)
        return self.trigger(dag_id, conf)

    def unfinished_runs(self) -> list[dict[str, Any]]:
        """Runs of every DAG that are queued or running."""
        states = "".join(f"&state={state}" for state in UNFINISHED)
        return self._list(f"/api/v2/dags/~/dagRuns?limit=100{states}", "dag_runs")

    def fail_run(self, dag_id: str, run_id: str, note: str) -> None:
        """Mark a run failed (its unfinished tasks with it), with a note saying why."""
        path = f"/api/v2/dags/{quote(dag_id, safe='')}/dagRuns/{quote(run_id, safe='')}"
        status, document = self.call("PATCH", path, {"state": "failed", "note": note[:1000]})
        if status != 200:
            raise AirflowApiError(f"could not end the run {dag_id}/{run_id} (HTTP {status}): {document}")

    def drop_queued_asset_events(self, dag_id: str, before: datetime) -> None:
        """Forget the asset events queued for the DAG before ``before`` (those that would start its next run)."""
        path = f"/api/v2/dags/{quote(dag_id, safe='')}/assets/queuedEvents?before={quote(before.isoformat())}"
        status, document = self.call("DELETE", path)
        if status not in (204, 404):  # 404: none was queued
            raise AirflowApiError(f"could not drop the queued asset events of {dag_id} (HTTP {status}): {document}")

    def _list(self, path: str, key: str) -> list[dict[str, Any]]:
        status, document = self.call("GET", path)
        if status != 200 or not isinstance(document, dict):
            raise AirflowApiError(f"GET {path} failed (HTTP {status}): {document}")
        return list(document.get(key) or [])
