"""A person answering Airflow's human-in-the-loop requests (``ApprovalOperator``) over its public REST API: the
request a task makes once it waits for its answer (``awaiting_input``), and the answer, as the UI's buttons give it.

Used by the tests (``tests/fixtures/approvals.py`` adds the in-process and browser ways) and by the soak, which
approves a ``recover_stream`` run as an operator would.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import quote

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


def quoted(*parts: str) -> list[str]:
    return [quote(p, safe="") for p in parts]


def detail_path(dag_id: str, run_id: str, task_id: str) -> str:
    """The REST path of one task's human-in-the-loop request (unmapped task: map index -1)."""
    dag, run, task = quoted(dag_id, run_id, task_id)
    return f"/api/v2/dags/{dag}/dagRuns/{run}/taskInstances/{task}/-1/hitlDetails"


def pending_request(call: Call, dag_id: str, run_id: str | None, task_id: str,
             since: datetime | None) -> dict[str, Any] | None:
    """The newest unanswered request of ``task_id`` in ``run_id`` (any run when None) created after ``since``,
    once its task waits for the answer (``awaiting_input``): the request is stored a moment before the task
    parks, and an answer in between races the task's own state change (the task then fails)."""
    dag, run, task = quoted(dag_id, run_id or "~", task_id)
    status, document = call("GET", f"/api/v2/dags/{dag}/dagRuns/{run}/hitlDetails"
                                   f"?task_id={task}&response_received=false&order_by=-created_at", None)
    if status != 200 or not isinstance(document, dict):
        return None
    for detail in document.get("hitl_details", []):
        created = datetime.fromisoformat(detail["created_at"].replace("Z", "+00:00"))
        if (since is None or created >= since) and detail["task_instance"].get("state") == "awaiting_input":
            return dict(detail)
    return None


def answer_request(call: Call, approval: Approval, detail: dict[str, Any]) -> Approval:
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


def run_state(call: Call, dag_id: str, run_id: str) -> str | None:
    dag, run = quoted(dag_id, run_id)
    status, document = call("GET", f"/api/v2/dags/{dag}/dagRuns/{run}", None)
    return document.get("state") if status == 200 and isinstance(document, dict) else None


def answer_over_rest(call: Call, dag_id: str, run_id: str, task_id: str, option: str, *,
                     settled: Callable[[], bool] = lambda: True, timeout: float = 300) -> Approval:
    """Wait until ``task_id`` of run ``run_id`` asks and ``settled()`` holds, then answer ``option`` through a
    real api-server (``call``: a logged-in client's; ``settled``: e.g. ``AirflowServer.parked``, the scheduler done
    with the parking worker).

    Raises AssertionError when the run ends first (it never asked) or nothing asks within ``timeout``.
    """
    approval = Approval(dag_id, task_id, option, run_id=run_id)
    request = wait_for_request(call, dag_id, run_id, task_id, settled=settled, timeout=timeout)
    answer_request(call, approval, request)
    assert approval.answered, approval.error
    return approval


def wait_for_request(call: Call, dag_id: str, run_id: str, task_id: str, *, settled: Callable[[], bool],
            timeout: float) -> dict[str, Any]:
    """The request of ``task_id`` in ``run_id`` once it waits for its answer and ``settled()`` holds; an
    AssertionError when the run ends first (it never asked) or nothing asks within ``timeout``."""
    deadline = time.monotonic() + timeout
    while (detail := pending_request(call, dag_id, run_id, task_id, None)) is None or not settled():
        state = run_state(call, dag_id, run_id)
        if state in ENDED:
            raise AssertionError(f"{dag_id}/{run_id} ended ({state}) before {task_id} asked for an answer")
        if time.monotonic() > deadline:
            raise AssertionError(f"{task_id} of {dag_id}/{run_id} did not ask within {timeout}s (run {state})")
        time.sleep(1)
    return detail
