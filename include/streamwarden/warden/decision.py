"""The warden's decision from a health verdict: nothing, alert, restart (after backoff), or escalate.

Only what a restart can fix is restarted: a dead or hung stream, or one that failed with ENVIRONMENT.
DATA_LOSS, INTEGRITY, MALFORMED, CONFIG and BUG are never restarted blindly: a person gets the failure
document and the recovery action (:func:`recovery_action`), and resumes with a ``recover_stream`` run (whose
Params the action spells out as JSON to paste into the trigger form) or a ``force_restart`` run.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from streamwarden.failures import FailureClass, FailureDocument
from streamwarden.runfiles.hold import Hold
from streamwarden.warden.health import HealthVerdict, Overall
from streamwarden.warden.restart_policy import RestartHistory
from streamwarden.warden.settings import WardenSettings

RESUME = "then trigger stream_supervisor with force_restart=true and a reason"
RECOVER_STREAM = "recover_stream"
ROLL_BACK = {"target": "last_validated", "dry_run": True}
"""recover_stream's Params to see what rolling the tables back to their last validated versions undoes."""
MAX_REASON = 300


def recover_stream_params(failure: FailureDocument | None) -> dict[str, Any]:
    """recover_stream's Params for a DATA_LOSS failure: resume the partition the failure document names at the
    earliest offset Kafka still holds (``details["available"][0]``), as a dry run; without that (e.g. a deleted
    topic) a dry run of the roll-back to the last validated versions, which shows what is replayed and lost."""
    where = "" if failure is None or failure.topic is None else f" at {failure.topic}[{failure.partition}]"
    message = "" if failure is None else f": {failure.message}"
    reason = f"DATA_LOSS{where}{message}"[:MAX_REASON]
    available = (failure.details or {}).get("available") if failure is not None else None
    if (failure is not None and failure.topic is not None and isinstance(failure.partition, int)
            and isinstance(available, list | tuple) and len(available) == 2
            and all(isinstance(bound, int) and not isinstance(bound, bool) for bound in available)):
        return {"target": "offsets", "offsets": {failure.topic: {str(failure.partition): available[0]}},
                "dry_run": True, "reason": reason}
    return {**ROLL_BACK, "reason": reason}


def _params(params: dict[str, Any]) -> str:
    return json.dumps(params)


def _data_loss_action(failure: FailureDocument | None) -> str:
    params = recover_stream_params(failure)
    if params["target"] == "offsets":
        ((topic, parts),) = params["offsets"].items()
        ((partition, earliest),) = parts.items()
        resume = (f"to resume {topic}[{partition}] at {earliest}, the earliest offset Kafka still holds, see "
                  "what is lost for good and what is replayed (the other partitions resume where the tables end)")
    else:
        resume = ("to see what a roll-back to the last validated versions undoes, replays and loses (the failure "
                  "document names no offset Kafka still holds)")
    return (f"offsets the stream needs are gone upstream (retention, topic deleted or recreated): decide what to "
            f"replay. Trigger {RECOVER_STREAM} with Params {_params(params)} {resume}; then again with "
            f"dry_run false to accept that loss (recover_stream records it in run/recoveries.jsonl and starts the "
            f"stream from a new checkpoint). Or accept the loss for one run (STREAMWARDEN_FAIL_ON_DATA_LOSS=false) "
            f"and {RESUME.removeprefix('then ')}; the commit protocol keeps the output exactly-once either way")


RECOVERY: dict[FailureClass, str] = {
    FailureClass.DATA_LOSS: _data_loss_action(None),
    FailureClass.INTEGRITY: "upstream broke ordering or sequencing at the topic/partition/offset in the "
    "failure document: check that site's producer (but when session_rows already holds that session's earlier "
    "seqs, the producer sent them and the stream lost the session's state: a defect, keep last_failure.json and "
    "the stream log and report it); to continue past it, set STREAMWARDEN_ON_GAP=resync "
    f"(quarantine until the next snapshot) or a lower STREAMWARDEN_INTEGRITY_TIER; {RESUME}; or roll the "
    f"tables back with {RECOVER_STREAM} {_params(ROLL_BACK)}",
    FailureClass.MALFORMED: "an undecodable record at the offset in the failure document: fix the producer, "
    f"or set STREAMWARDEN_MALFORMED_POLICY=quarantine to dead-letter such records; {RESUME}; or roll the "
    f"tables back with {RECOVER_STREAM} {_params(ROLL_BACK)}",
    FailureClass.CONFIG: "invalid settings or an incompatible upgrade: fix the setting named in the "
    f"message (or roll back the release); {RESUME}",
    FailureClass.BUG: "an unclassified error, a defect: read the traceback in last_failure.json and the "
    f"stream log under run/logs, fix or roll back the release; {RESUME}",
}
"""What a person does after each failure class; DATA_LOSS here without the failure document's offsets."""


def recovery_action(failure_class: FailureClass, failure: FailureDocument | None = None) -> str:
    """What a person does after a failure of ``failure_class``; for DATA_LOSS with recover_stream's Params
    prefilled from the failure document (:func:`recover_stream_params`)."""
    if failure_class is FailureClass.DATA_LOSS:
        return _data_loss_action(failure)
    return RECOVERY[failure_class]


class Action(StrEnum):
    NONE = "none"
    ALERT = "alert"  # degraded: tell someone, change nothing
    RESTART = "restart"
    ESCALATE = "escalate"  # alert and fail the run: a person must act


@dataclass(frozen=True)
class Decision:
    """What to do, why, and what a person should do next."""

    action: Action
    reason: str
    next_action: str
    severity: str = "info"
    wait_until: float | None = None
    breaker_open: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> Decision:
        return cls(**{**document, "action": Action(document["action"])})


def decide(verdict: HealthVerdict, history: RestartHistory, warden: WardenSettings, now: float,
           *, force_restart: bool = False, reason: str = "", hold: Hold | None = None) -> Decision:
    """The warden's rules, in order: a hold (a recovery or an upgrade owns the stream), operator request,
    healthy, starting, degraded, failed, restart."""
    if hold is not None:
        return Decision(Action.NONE, f"the stream is {hold.describe()}",
                        f"nothing: {hold.owner} starts the stream when it is done (if that run is gone, "
                        "`streamwarden release-hold`, then trigger stream_supervisor)")
    if force_restart:
        return Decision(Action.RESTART, f"operator requested a restart: {reason or 'no reason given'}",
                        "restart now (drain, then signals), with the same checkpoint")
    if verdict.overall is Overall.HEALTHY:
        return Decision(Action.NONE, "healthy", "nothing to do")
    if verdict.overall is Overall.STARTING:
        return Decision(Action.NONE, "; ".join(verdict.reasons), "let it start; the next run judges it")
    if verdict.overall is Overall.DEGRADED:
        return Decision(Action.ALERT, "; ".join(verdict.reasons),
                        "watch the lag; if it keeps growing add executors or cores, raise "
                        "STREAMWARDEN_MAX_OFFSETS_PER_TRIGGER, or check the broker", severity="warning")
    if not verdict.restartable:
        failure_class = verdict.failure_class or FailureClass.BUG
        return Decision(Action.ESCALATE, f"{verdict.label}: {'; '.join(verdict.reasons)}",
                        f"no automatic restart. {recovery_action(failure_class, verdict.failure)}", severity="critical")
    if history.breaker_open(now, warden.max_restarts_per_hour):
        recent = history.recent(now)
        return Decision(Action.ESCALATE,
                        f"{verdict.label} and circuit breaker open: {len(recent)} starts in the last hour "
                        f"(limit {warden.max_restarts_per_hour})",
                        "automatic restarts stopped: read the stream logs under run/logs and the failure "
                        f"documents; fix the cause, {RESUME}", severity="critical", breaker_open=True)
    until = history.backoff_until(now, warden.backoff_base, warden.backoff_max)
    when = "now" if until is None else f"at {datetime.fromtimestamp(until, UTC).isoformat()} (backoff)"
    return Decision(Action.RESTART, f"{verdict.label}: {'; '.join(verdict.reasons)}",
                    f"restart {when} with the same checkpoint", severity="warning", wait_until=until)
