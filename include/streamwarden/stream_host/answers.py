"""What a stream host answers the warden: one JSON document on stdout per command, typed here on both sides."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


class Outcome(StrEnum):
    """How a command on the stream host ended."""

    STARTED = "started"  # launch: the driver holds the lease
    ALREADY_RUNNING = "already_running"  # launch: a live process holds the lease
    HELD = "held"  # launch: a recovery or an upgrade holds the stream
    LAUNCH_FAILED = "launch_failed"  # launch: the process died, or did not take the lease in time
    STOPPED = "stopped"  # halt: nothing of the stream runs on the host now
    STOP_FAILED = "stop_failed"  # halt: it survived SIGKILL


@dataclass(frozen=True)
class Answer:
    """One answer: the outcome, and what goes with it (the driver's pid, the holder, the launch log, how the
    stream was stopped)."""

    outcome: Outcome
    message: str = ""
    pid: int | None = None
    holder: dict[str, Any] | None = None
    log_path: str = ""
    exit_code: int | None = None
    log_tail: str = ""
    stop: dict[str, Any] = field(default_factory=dict)

    def to_line(self) -> str:
        return json.dumps({**asdict(self), "outcome": self.outcome.value}, sort_keys=True)

    @property
    def exit_status(self) -> int:
        """The command's exit code: 0 when it did what it was asked, 1 otherwise (the answer says why)."""
        return 0 if self.outcome in (Outcome.STARTED, Outcome.STOPPED) else 1


class AnswerError(ValueError):
    """The host's output holds no answer (the command did not run, or is not Streamwarden's)."""


def parse_answer(stdout: str) -> Answer:
    """The last line of ``stdout`` that is an answer (spark-submit or a login banner may print before it)."""
    for line in reversed(stdout.strip().splitlines()):
        try:
            document = json.loads(line)
            outcome = Outcome(document.pop("outcome"))
            return Answer(outcome=outcome, **document)
        except (ValueError, TypeError, KeyError, AttributeError):
            continue
    raise AnswerError("no answer in the stream host's output")
