"""Answering Airflow's human-in-the-loop requests (``ApprovalOperator``) from a test, as a person would.

Two ways, one protocol (the HITL REST endpoints of Airflow's public API):

- ``answer_in_process``: for ``dag.test()``, which never answers an approval by itself (it keeps logging
  "Waiting for Human-in-the-loop input"). A thread in the same process waits for the request in the same
  metadata DB and answers it through Airflow's own API app (``TestClient(create_app())``), signed in as an
  admin with a token the app's auth manager issues; the run then goes on.
- ``answer_over_rest``: for a real api-server (``airflow standalone``), through a logged-in ``AirflowApi``;
  ``answer_in_browser``: the same wait, then the option's button clicked in the UI (:mod:`browser`).

Both record what the person was shown (subject, body, options), so a test can assert the plan was there.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from streamwarden.local.up import AirflowApi

Call = Callable[[str, str, dict[str, Any] | None], tuple[int, Any]]
ENDED = ("success", "failed")


@dataclass
class Approval:
    """One human-in-the-loop request and the answer a test gave it."""

    dag_id: str
    task_id: str
    option: str
    run_id: str | None = None
    subject: str | None = None
    body: str | None = None
    options: list[str] = field(default_factory=list)
    status: int | None = None  # of the answering PATCH
    answer: Any = None  # the API's response to it
    error: str | None = None  # why it was not answered (in-process: read at the end)

    @property
    def answered(self) -> bool:
        return self.status == 200


def _quoted(*parts: str) -> list[str]:
    return [quote(p, safe="") for p in parts]


def detail_path(dag_id: str, run_id: str, task_id: str) -> str:
    """The REST path of one task's human-in-the-loop request (unmapped task: map index -1)."""
    dag, run, task = _quoted(dag_id, run_id, task_id)
    return f"/api/v2/dags/{dag}/dagRuns/{run}/taskInstances/{task}/-1/hitlDetails"


def _pending(call: Call, dag_id: str, run_id: str | None, task_id: str,
             since: datetime | None) -> dict[str, Any] | None:
    """The newest unanswered request of ``task_id`` in ``run_id`` (any run when None) created after ``since``,
    once its task waits for the answer (``awaiting_input``): the request is stored a moment before the task
    parks, and an answer in between races the task's own state change (the task then fails)."""
    dag, run, task = _quoted(dag_id, run_id or "~", task_id)
    status, document = call("GET", f"/api/v2/dags/{dag}/dagRuns/{run}/hitlDetails"
                                   f"?task_id={task}&response_received=false&order_by=-created_at", None)
    if status != 200 or not isinstance(document, dict):
        return None
    for detail in document.get("hitl_details", []):
        created = datetime.fromisoformat(detail["created_at"].replace("Z", "+00:00"))
        if (since is None or created >= since) and detail["task_instance"].get("state") == "awaiting_input":
            return dict(detail)
    return None


def _answer(call: Call, approval: Approval, detail: dict[str, Any]) -> Approval:
    approval.run_id = detail["task_instance"]["dag_run_id"]
    approval.subject, approval.body = detail.get("subject"), detail.get("body")
    approval.options = list(detail.get("options") or [])
    assert approval.run_id is not None
    approval.status, approval.answer = call(
        "PATCH", detail_path(approval.dag_id, approval.run_id, approval.task_id),
        {"chosen_options": [approval.option], "params_input": {}})
    if not approval.answered:
        approval.error = f"the answer was refused (HTTP {approval.status}): {approval.answer}"
    return approval


def _run_state(call: Call, dag_id: str, run_id: str) -> str | None:
    dag, run = _quoted(dag_id, run_id)
    status, document = call("GET", f"/api/v2/dags/{dag}/dagRuns/{run}", None)
    return document.get("state") if status == 200 and isinstance(document, dict) else None


def answer_over_rest(api: AirflowApi, dag_id: str, run_id: str, task_id: str, option: str, *,
                     settled: Callable[[], bool] = lambda: True, timeout: float = 300) -> Approval:
    """Wait until ``task_id`` of run ``run_id`` asks and ``settled()`` holds, then answer ``option`` through a
    real api-server (``settled``: e.g. ``AirflowServer.parked``, the scheduler done with the parking worker).

    Raises AssertionError when the run ends first (it never asked) or nothing asks within ``timeout``.
    """
    approval = Approval(dag_id, task_id, option, run_id=run_id)
    _answer(api.call, approval, _asking(api.call, dag_id, run_id, task_id, settled=settled, timeout=timeout))
    assert approval.answered, approval.error
    return approval


def answer_in_browser(api: AirflowApi, driver: Any, base: str, shots: Path, *, dag_id: str, run_id: str,
                      task_id: str, option: str, settled: Callable[[], bool] = lambda: True,
                      timeout: float = 300) -> Approval:
    """As :func:`answer_over_rest`, but the answer is given as a person gives it: ``option``'s button clicked on
    the task's "Required Actions" tab in a logged-in browser. What the request showed and the recorded answer are
    read back over REST (``status``: of that read)."""
    from browser import choose_in_ui

    detail = _asking(api.call, dag_id, run_id, task_id, settled=settled, timeout=timeout)
    approval = Approval(dag_id, task_id, option, run_id=run_id, subject=detail.get("subject"),
                        body=detail.get("body"), options=list(detail.get("options") or []))
    choose_in_ui(driver, base, shots, dag_id=dag_id, run_id=run_id, task_id=task_id, option=option)
    approval.status, approval.answer = api.call("GET", detail_path(dag_id, run_id, task_id), None)
    recorded = approval.answer if isinstance(approval.answer, dict) else {}
    assert recorded.get("response_received") and recorded.get("chosen_options") == [option], recorded
    return approval


def _asking(call: Call, dag_id: str, run_id: str, task_id: str, *, settled: Callable[[], bool],
            timeout: float) -> dict[str, Any]:
    """The request of ``task_id`` in ``run_id`` once it waits for its answer and ``settled()`` holds; an
    AssertionError when the run ends first (it never asked) or nothing asks within ``timeout``."""
    deadline = time.monotonic() + timeout
    while (detail := _pending(call, dag_id, run_id, task_id, None)) is None or not settled():
        state = _run_state(call, dag_id, run_id)
        if state in ENDED:
            raise AssertionError(f"{dag_id}/{run_id} ended ({state}) before {task_id} asked for an answer")
        if time.monotonic() > deadline:
            raise AssertionError(f"{task_id} of {dag_id}/{run_id} did not ask within {timeout}s (run {state})")
        time.sleep(1)
    return detail


def in_process_client() -> Call:
    """``call(method, path, body)`` on Airflow's API app in this process (this process's metadata DB),
    signed in as an admin of the configured auth manager."""
    from airflow.api_fastapi.app import create_app, get_auth_manager
    from fastapi.testclient import TestClient

    client = TestClient(create_app("core"))
    manager = get_auth_manager()
    user = manager.deserialize_user({"sub": "admin", "role": "admin", "teams": None})
    headers = {"Authorization": f"Bearer {manager.generate_jwt(user)}"}

    def call(method: str, path: str, body: dict[str, Any] | None) -> tuple[int, Any]:
        response = client.request(method, path, json=body, headers=headers)
        try:
            return response.status_code, response.json()
        except ValueError:
            return response.status_code, None

    return call


@contextmanager
def answer_in_process(dag_id: str, task_id: str, option: str) -> Iterator[Approval]:
    """While the block runs ``dag.test()``, answer the first request ``task_id`` of a new run of ``dag_id``
    makes with ``option``, however long the tasks before it take (on a loaded machine a plan can take
    minutes; a thread that gave up would leave ``dag.test()`` waiting for ever).

    Yields the ``Approval``, filled in once answered. If the answer fails after the request appeared, the
    asking task is marked failed through the API, so ``dag.test()`` does not wait forever. On leaving, an answer that
    failed (other than by no request appearing: ``approval.run_id`` stays None then) raises AssertionError,
    unless the block itself raised.
    """
    approval = Approval(dag_id, task_id, option)
    call = in_process_client()
    since = datetime.now(UTC)
    done = threading.Event()

    def work() -> None:
        try:
            while not done.is_set():
                detail = _pending(call, dag_id, None, task_id, since)
                if detail is not None:
                    _answer(call, approval, detail)
                    break
                done.wait(0.5)
        except Exception as exc:  # the test thread reads it; nothing else would see it
            approval.error = f"{type(exc).__name__}: {exc}"
        if approval.run_id is not None and not approval.answered:  # fail the task, or dag.test() waits forever
            dag, run, task = _quoted(dag_id, approval.run_id, task_id)
            call("PATCH", f"/api/v2/dags/{dag}/dagRuns/{run}/taskInstances/{task}", {"new_state": "failed"})

    thread = threading.Thread(target=work, name=f"answer-{dag_id}.{task_id}", daemon=True)
    thread.start()
    try:
        yield approval
    finally:
        done.set()
        thread.join(30)
    if approval.run_id is not None:
        assert approval.answered, approval.error
