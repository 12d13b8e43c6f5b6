"""A plan's approval answer told as what it was: approved, rejected by a person, timed out, failed, or none."""

from __future__ import annotations

from datetime import UTC, datetime

from streamwarden.approvals import ApprovalAnswer, Verdict, answer_from_event, not_approved

AT = datetime(2026, 11, 27, 12, tzinfo=UTC)
ANNA = {"id": "anna", "name": "Anna"}


def test_each_resume_event_is_read_as_its_verdict_and_survives_its_xcom() -> None:
    answers = [answer_from_event({"chosen_options": ["Approve"], "responded_by_user": ANNA, "responded_at": AT}),
               answer_from_event({"chosen_options": ["Reject"], "responded_by_user": ANNA, "responded_at": AT}),
               answer_from_event({"chosen_options": ["Reject"], "responded_by_user": None, "responded_at": AT,
                                  "timedout": True}),
               answer_from_event({"error": "The timeout has passed", "error_type": "timeout"})]
    assert [a.verdict for a in answers] == [Verdict.APPROVED, Verdict.REJECTED, Verdict.TIMED_OUT, Verdict.FAILED]
    assert (answers[1].responded_by, answers[1].responded_at) == ("Anna", AT.isoformat())
    assert answers[3].error == "timeout: The timeout has passed"
    assert [ApprovalAnswer.from_json(a.to_json()) for a in answers] == answers


def test_rejected_timed_out_failed_and_no_answer_each_get_their_own_outcome_and_next_action() -> None:
    rejected = answer_from_event({"chosen_options": ["Reject"], "responded_by_user": ANNA, "responded_at": AT})
    timed_out = ApprovalAnswer(Verdict.TIMED_OUT, ("Reject",), None, AT.isoformat())
    failed = ApprovalAnswer(Verdict.FAILED, error="validation: bad option")
    told = {name: not_approved(answer, "recover_stream") for name, answer in
            {"rejected": rejected, "timed out": timed_out, "failed": failed, "none": None}.items()}
    assert told["rejected"][0] == f"rejected by Anna at {AT.isoformat()}; nothing changed"
    assert told["rejected"][1].startswith("none needed")
    assert told["timed out"][0].startswith("not answered before the approval timed out (its default, Reject")
    assert "answer the approval under Required actions in time" in told["timed out"][1]
    assert told["failed"][0] == "the approval request failed (validation: bad option); nothing changed"
    assert told["none"][0].startswith("no answer recorded") and "approval task's log" in told["none"][1]
    assert len({outcome for outcome, _ in told.values()}) == len({action for _, action in told.values()}) == 4
