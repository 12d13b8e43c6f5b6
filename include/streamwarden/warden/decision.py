"""The warden's decision from a health verdict: nothing, alert, restart (after backoff), or escalate.

Only what a restart can fix is restarted: a dead or hung stream, or one that failed with ENVIRONMENT.
DATA_LOSS, INTEGRITY, MALFORMED, CONFIG and BUG are never restarted blindly: a person gets the failure
document and the recovery action (:data:`RECOVERY`), and resumes with a ``force_restart`` run.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from streamwarden.failures import FailureClass
from streamwarden.runfiles.hold import Hold
from streamwarden.warden.health import HealthVerdict, Overall
from streamwarden.warden.restart_policy import RestartHistory
from streamwarden.warden.settings import WardenSettings

RESUME = "then trigger stream_supervisor with force_restart=true and a reason"
RECOVERY: dict[FailureClass, str] = {
    FailureClass.DATA_LOSS: "offsets the stream needs are gone upstream (retention, topic deleted or "
    "recreated): decide what to replay. Either accept the loss for one run (STREAMWARDEN_FAIL_ON_DATA_LOSS="
    "false) or start a new checkpoint at explicit STREAMWARDEN_STARTING_OFFSETS; the commit protocol keeps "
    f"the output exactly-once either way; {RESUME}",
    FailureClass.INTEGRITY: "upstream broke ordering or sequencing at the topic/partition/offset in the "
    "failure document: check that site's producer; to continue past it, set STREAMWARDEN_ON_GAP=resync "
    f"(quarantine until the next snapshot) or a lower STREAMWARDEN_INTEGRITY_TIER; {RESUME}",
    FailureClass.MALFORMED: "an undecodable record at the offset in the failure document: fix the producer, "
    f"or set STREAMWARDEN_MALFORMED_POLICY=quarantine to dead-letter such records; {RESUME}",
    FailureClass.CONFIG: "invalid settings or an incompatible upgrade: fix the setting named in the "
    f"message (or roll back the release); {RESUME}",
    FailureClass.BUG: "an unclassified error, a defect: read the traceback in last_failure.json and the "
    f"stream log under run/logs, fix or roll back the release; {RESUME}",
}


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
                        f"no automatic restart. {RECOVERY[failure_class]}", severity="critical")
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
