"""What a person answered to a plan's approval request, told as what it was: approved, rejected by someone,
no one answered before the timeout, or no answer recorded at all, each with its own next action.

Airflow's ``ApprovalOperator`` skips the steps after a Reject by raising, so it pushes no return value on
the very answer a report must tell apart; the DAGs record the answer themselves (the ``answer`` XCom of the
approval task, :func:`answer_from_event`) before the operator acts on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime
from enum import Enum
from typing import Any

ANSWER_KEY = "answer"
"""The approval task's XCom key for :class:`ApprovalAnswer`."""
APPROVE, REJECT = "Approve", "Reject"


class Verdict(Enum):
    APPROVED = "approved"
    REJECTED = "rejected"  # a person chose Reject
    TIMED_OUT = "timed out"  # no one answered in time: the request's default (Reject) was applied
    FAILED = "failed"  # the request itself failed (no default at a timeout, an invalid answer)


@dataclass(frozen=True)
class ApprovalAnswer:
    """One answer as the approval task received it."""

    verdict: Verdict
    chosen_options: tuple[str, ...] = ()
    responded_by: str | None = None
    responded_at: str | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "verdict": self.verdict.value, "chosen_options": list(self.chosen_options)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ApprovalAnswer:
        return cls(Verdict(data["verdict"]), tuple(data.get("chosen_options") or ()), data.get("responded_by"),
                   data.get("responded_at"), data.get("error"))


def answer_from_event(event: Mapping[str, Any]) -> ApprovalAnswer:
    """The answer in an approval request's resume event (``execute_complete``'s ``event``)."""
    if "error" in event:
        return ApprovalAnswer(Verdict.FAILED, error=f"{event.get('error_type', 'unknown')}: {event['error']}")
    chosen = tuple(event.get("chosen_options") or ())
    user = event.get("responded_by_user")
    at = event.get("responded_at")
    when = at.isoformat() if isinstance(at, datetime) else None if at is None else str(at)
    if event.get("timedout") or user is None:
        return ApprovalAnswer(Verdict.TIMED_OUT, chosen, None, when)
    return ApprovalAnswer(Verdict.APPROVED if chosen == (APPROVE,) else Verdict.REJECTED, chosen,
                          str(user.get("name") or user.get("id")), when)


def not_approved(answer: ApprovalAnswer | None, dag_id: str) -> tuple[str, str]:
    """``(outcome, next action)`` of a run that stopped at its approval, nothing changed."""
    again = f"trigger {dag_id} again"
    if answer is None:
        return ("no answer recorded: the approval task failed, was marked failed or skipped, or the run ended before "
                "an answer; nothing changed",
                f"read the approval task's log; {again} when the plan should still be carried out")
    if answer.verdict is Verdict.REJECTED:
        return (f"rejected by {answer.responded_by} at {answer.responded_at}; nothing changed",
                f"none needed; {again} with other Params if a different plan is wanted")
    if answer.verdict is Verdict.TIMED_OUT:
        return (f"not answered before the approval timed out (its default, {'/'.join(answer.chosen_options)}, was "
                "applied); nothing changed", f"{again} and answer the approval under Required actions in time")
    if answer.verdict is Verdict.FAILED:
        return (f"the approval request failed ({answer.error}); nothing changed",
                f"read the approval task's log; {again}")
    return ("approved, but the steps after the approval did not run; nothing changed",
            f"read the run's task states; {again}")
