"""The faults an operator causes on purpose, run as a person runs them, over Airflow's REST API: a ``recover_stream``
to the last validated version, approved; an ``upgrade_stream`` to a release that works and to one that fails (and
must be rolled back). Each is judged by how its run ended, not only that it was started.

The releases are files the soak installs in the platform's home before `up` starts (:func:`install_releases`).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from streamwarden.approvals import APPROVE
from streamwarden.testing.approvals import answer_over_rest
from streamwarden.upgrade.release import read_active

from .targets import Platform, TargetMissingError

RECOVER_DAG, UPGRADE_DAG, VALIDATION_DAG = "recover_stream", "upgrade_stream", "validate_output"
APPROVAL_TASK = "approve"
RUN_TIMEOUT_S = 1500.0
HEALTH_MINUTES = 1.0
RELEASES = {
    "soak-a": "trigger_interval: 4s\n",
    "soak-b": "trigger_interval: 3s\n",
    "soak-failing": "session_handler: streamwarden_soak.handlers:FailingReconstruction\n",
}
"""Two releases that work (the stream alternates between them) and one whose every batch fails."""
GOOD = ("soak-a", "soak-b")
FAILING = "soak-failing"


def install_releases(releases: Path) -> None:
    releases.mkdir(parents=True, exist_ok=True)
    for name, text in RELEASES.items():
        (releases / f"{name}.yaml").write_text(text)


def _wait_for_end(platform: Platform, dag_id: str, run_id: str,
                  stopping: threading.Event) -> tuple[str | None, dict[str, str | None]]:
    """The run's state once it ended (or as it is at the timeout, or when the soak stops) and its tasks' states."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    state = None
    while time.monotonic() < deadline:
        state = platform.run_state(dag_id, run_id)
        if state in ("success", "failed") or stopping.wait(5):
            break
    tasks = {str(ti["task_id"]): ti.get("state") for ti in platform.task_instances(dag_id, run_id)}
    return state, tasks


def recover(platform: Platform, index: int, stopping: threading.Event) -> dict[str, Any]:
    """Trigger a recovery to the last validated version, approve it over REST, wait for the run's end."""
    status, document = platform.call("GET", f"/api/v2/dags/{VALIDATION_DAG}/dagRuns?state=success&limit=1")
    if status != 200 or not isinstance(document, dict) or not document.get("dag_runs"):
        raise TargetMissingError("no validate_output run has passed yet: there is no validated version to go back to")
    run_id = platform.trigger(RECOVER_DAG, {"target": "last_validated", "dry_run": False,
                                            "reason": f"soak fault {index}"}, f"soak fault {index}")
    try:
        answered = answer_over_rest(platform.call, RECOVER_DAG, run_id, APPROVAL_TASK, APPROVE,
                                    timeout=900).subject
    except AssertionError as exc:  # the run ended before it asked, or nothing asked: its end says why
        answered = f"not answered: {exc}"
    state, tasks = _wait_for_end(platform, RECOVER_DAG, run_id, stopping)
    return {"dag_run": run_id, "state": state, "tasks": tasks, "approval": answered, "expected": "success"}


def upgrade(platform: Platform, index: int, stopping: threading.Event, *, failing: bool) -> dict[str, Any]:
    """An upgrade to the failing release (expected: its watch fails, the rollback succeeds, the previous release
    is in force again) or to whichever working release is not in force (expected: success)."""
    active = read_active(platform.settings)
    before = None if active is None else active.release.name
    release = FAILING if failing else (GOOD[1] if before == GOOD[0] else GOOD[0])
    run_id = platform.trigger(UPGRADE_DAG, {"release": release, "health_minutes": HEALTH_MINUTES, "dry_run": False,
                                            "reason": f"soak fault {index}"}, f"soak fault {index}")
    state, tasks = _wait_for_end(platform, UPGRADE_DAG, run_id, stopping)
    after = read_active(platform.settings)
    return {"dag_run": run_id, "release": release, "state": state, "tasks": tasks, "active_before": before,
            "active_after": None if after is None else after.release.name,
            "expected": "rolled back" if failing else "success"}


def as_expected(detail: dict[str, Any]) -> bool:
    """The operator's run ended as it should: a recovery or a working upgrade green; a failing upgrade's watch
    failed, its rollback succeeded, the previous release in force again, and the run red (a failed step is never
    green)."""
    if detail.get("expected") == "success":
        return detail.get("state") == "success"
    tasks = detail.get("tasks", {})
    return (detail.get("state") == "failed" and tasks.get("watch_health") == "failed"
            and tasks.get("rollback") == "success" and detail.get("active_after") == detail.get("active_before"))
