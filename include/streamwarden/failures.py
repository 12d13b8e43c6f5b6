"""Classified failures: every way the stream can die has a class, an exit code and a document.

The warden decides from the class: ENVIRONMENT failures are restarted, the others call a person.
An exception raised in a Spark worker or in the Python source process reaches the driver only as
text, so each error carries a machine-readable tag (``[streamwarden:CLASS]{json}``) in its message
that :func:`classify` finds again on the driver.
"""

from __future__ import annotations

import json
import os
import re
import traceback
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from streamwarden.secrets import redact


class FailureClass(StrEnum):
    """Why the stream stopped; decides whether a restart can help."""

    ENVIRONMENT = "ENVIRONMENT"  # broker/cluster/disk unavailable: a restart may fix it
    DATA_LOSS = "DATA_LOSS"  # offsets expired or vanished upstream: needs a recovery decision
    INTEGRITY = "INTEGRITY"  # sequence gap, duplicate, session split across partitions
    MALFORMED = "MALFORMED"  # undecodable input under a fail policy
    CONFIG = "CONFIG"  # invalid settings or an incompatible upgrade
    BUG = "BUG"  # anything unclassified: a defect in Streamwarden or the user's handler


EXIT_CODES: dict[FailureClass, int] = {
    FailureClass.BUG: 70,
    FailureClass.ENVIRONMENT: 75,
    FailureClass.CONFIG: 78,
    FailureClass.DATA_LOSS: 81,
    FailureClass.INTEGRITY: 82,
    FailureClass.MALFORMED: 83,
}
EXIT_ALREADY_RUNNING = 73
"""Exit code when another instance holds the checkpoint lease (not a failure of the running job)."""

_PYTHON_ERROR_LINE = re.compile(r"^((?:[A-Za-z_][\w.]*)?(?:Error|Exception|Failure)\b: .+)$", re.MULTILINE)
_TAG = re.compile(r"\[streamwarden:([A-Z_]+)\](\{.*?\})(?=\s*\[/streamwarden\])", re.DOTALL)


class StreamwardenError(Exception):
    """Base of classified errors; carries where in Kafka the problem was seen."""

    failure_class: FailureClass = FailureClass.BUG

    def __init__(
        self,
        message: str,
        *,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        self.message = message
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.details = details or {}
        payload = {"message": message, "topic": topic, "partition": partition, "offset": offset,
                   "details": self.details}
        where = "" if topic is None else f" (topic={topic} partition={partition} offset={offset})"
        super().__init__(
            f"{self.failure_class.value}: {message}{where} "
            f"[streamwarden:{self.failure_class.value}]{json.dumps(payload, sort_keys=True)}[/streamwarden]"
        )


class EnvironmentFailure(StreamwardenError):  # noqa: N818 - a failure class, not a bug
    """A dependency (broker, cluster, filesystem) is unavailable."""

    failure_class = FailureClass.ENVIRONMENT


class DataLossError(StreamwardenError):
    """Offsets the job must read are gone (retention, topic deleted or recreated)."""

    failure_class = FailureClass.DATA_LOSS


class IntegrityError(StreamwardenError):
    """Upstream broke an ordering or sequencing guarantee."""

    failure_class = FailureClass.INTEGRITY


class MalformedDataError(StreamwardenError):
    """Input could not be decoded and the policy says fail."""

    failure_class = FailureClass.MALFORMED


class ConfigError(StreamwardenError):
    """Settings are invalid or incompatible with the existing checkpoint/state."""

    failure_class = FailureClass.CONFIG


@dataclass(frozen=True)
class FailureDocument:
    """What ``last_failure.json`` holds: enough for the warden and a person to decide."""

    failure_class: FailureClass
    message: str
    exit_code: int
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    details: dict[str, Any] = field(default_factory=dict)
    occurred_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    pid: int = field(default_factory=os.getpid)
    traceback: str = ""

    def to_json(self) -> dict[str, Any]:
        """The JSON form, with the class as a plain string and every secret masked (it is written, shown
        by ``status`` and sent in alerts)."""
        document = asdict(self)
        document["failure_class"] = self.failure_class.value
        redacted: dict[str, Any] = redact(document)
        return redacted

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> FailureDocument:
        """Inverse of :meth:`to_json`."""
        return cls(**{**document, "failure_class": FailureClass(document["failure_class"])})


_ENVIRONMENT_HINTS = (
    "Connection refused", "Broker transport failure", "_TRANSPORT", "_ALL_BROKERS_DOWN",
    "No space left on device", "Python worker failed to connect back", "SparkContext was shut down",
    "_TIMED_OUT", "Connection reset",
)

_PROCESS_DEATHS = (
    (("java.io.EOFException", "PythonStreamingSourceRunner"),
     "the Kafka source's Python process died while planning a batch (java.io.EOFException in Spark's "
     "PythonStreamingSourceRunner): a native crash of the Kafka client (on the embedded Tansu broker, a topic "
     "deleted while the source fetched it) or a kill; a restart resumes from the checkpoint"),
    (("Python worker exited unexpectedly (crashed)",),
     "a Python worker died during a batch (a native crash or a kill; its stderr is in the stream's log); "
     "a restart resumes from the checkpoint"),
)
"""Deaths of a Python process under Spark, seen only as the JVM's text: a restart can help (a repeat within the
hour opens the warden's breaker), so they are ENVIRONMENT, each with a message saying what died."""


def classify(exc: BaseException) -> FailureDocument:
    """Turn any exception (also one that crossed the JVM as text) into a failure document."""
    trace = "".join(traceback.format_exception(exc))[-8000:]
    if isinstance(exc, StreamwardenError):
        cls_ = exc.failure_class
        return FailureDocument(cls_, exc.message, EXIT_CODES[cls_], exc.topic, exc.partition, exc.offset,
                               exc.details, traceback=trace)
    text = f"{exc}\n{trace}\n{_jvm_text(exc)}"
    match = _TAG.search(text)
    if match:
        cls_ = FailureClass(match.group(1))
        payload = json.loads(match.group(2))
        return FailureDocument(cls_, payload["message"], EXIT_CODES[cls_], payload.get("topic"),
                               payload.get("partition"), payload.get("offset"), payload.get("details") or {},
                               traceback=trace)
    for signs, message in _PROCESS_DEATHS:
        if all(sign in text for sign in signs):
            return FailureDocument(FailureClass.ENVIRONMENT, message, EXIT_CODES[FailureClass.ENVIRONMENT],
                                   traceback=trace)
    cls_ = FailureClass.ENVIRONMENT if any(h in text for h in _ENVIRONMENT_HINTS) else FailureClass.BUG
    return FailureDocument(cls_, _root_cause(exc, text)[:2000], EXIT_CODES[cls_], traceback=trace)


def _jvm_text(exc: BaseException) -> str:
    """The JVM stack traces a PySpark exception and its causes carry (a StreamingQueryException's message
    names only the query; what failed is in its trace)."""
    parts: list[str] = []
    current: object = exc
    while current is not None and len(parts) < 8:
        parts.append(str(getattr(current, "_stackTrace", "") or ""))
        current = getattr(current, "_cause", None)
    return "\n".join(parts)[-20000:]


def _root_cause(exc: BaseException, text: str) -> str:
    """The innermost Python exception line (one raised in a worker arrives wrapped in JVM text)."""
    causes = _PYTHON_ERROR_LINE.findall(str(exc))
    if causes:
        return str(causes[-1]).strip()
    first_line = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first_line}"
