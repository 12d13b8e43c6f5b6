"""Alerts: what a person is told, and the back-ends that tell them (log, webhook, e-mail); every capability raises
them (which back-ends are configured is the warden's: :func:`streamwarden.warden.alerts.notifiers`).

Every alert carries the verdict, the failure class (and document), the last progress and the next action.
Each alert is also appended to ``<run_root>/alerts.jsonl`` with the outcome of every delivery, so a failed
webhook never hides an alert and tests (and people) can read what was sent.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from streamwarden.secrets import redact, scrub

EmailSender = Callable[[list[str], str, str], None]
"""Sends (recipients, subject, HTML body)."""


@dataclass(frozen=True)
class Alert:
    """One message to a person."""

    severity: str  # info | warning | critical
    summary: str
    verdict: dict[str, Any]
    failure_class: str | None
    failure: dict[str, Any] | None
    last_progress: dict[str, Any]
    next_action: str
    source: str = ""  # which DAG run raised it
    key: str | None = None  # the cause; an alert with a key already recorded is not sent again
    raised_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())

    @classmethod
    def from_verdict(cls, severity: str, summary: str, verdict: dict[str, Any], next_action: str,
                     *, source: str = "", key: str | None = None) -> Alert:
        """An alert with the failure and last-progress fields taken from a verdict document."""
        progress = {k: verdict.get(k) for k in ("last_batch_id", "last_progress_at", "heartbeat_age_s",
                                                "total_lag", "max_lag")}
        return cls(severity, summary, verdict, verdict.get("failure_class"), verdict.get("failure"), progress,
                   next_action, source=source, key=key)

    def to_json(self) -> dict[str, Any]:
        """The JSON form (webhook body, ``alerts.jsonl``, XCom), every secret masked."""
        document: dict[str, Any] = redact(asdict(self))
        return document

    def text(self) -> str:
        """Plain text for logs and e-mail, every secret masked."""
        return scrub(f"[{self.severity.upper()}] {self.summary}\nverdict: {self.verdict.get('label')}\n"
                     f"failure class: {self.failure_class or '-'}\nlast progress: {self.last_progress}\n"
                     f"next action: {self.next_action}\nsource: {self.source or '-'}")


class Notifier(Protocol):
    """An alert back-end; ``send`` raises when delivery failed."""

    name: str

    def send(self, alert: Alert) -> None: ...


class LogNotifier:
    """Writes the alert to a logger (the Airflow task log)."""

    name = "log"

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger

    def send(self, alert: Alert) -> None:
        level = logging.ERROR if alert.severity == "critical" else logging.WARNING
        self.logger.log(level, "ALERT\n%s", alert.text())


class WebhookNotifier:
    """POSTs the alert as JSON (``application/json``); any non-2xx answer is a failed delivery.

    Credentials in the URL (``https://user:password@host/...``) are sent as HTTP Basic authentication,
    never as part of the address (which would end up in error messages and proxy logs).
    """

    name = "webhook"

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        parts = urllib.parse.urlsplit(url)
        self.headers = {"Content-Type": "application/json", "User-Agent": "streamwarden-warden"}
        if parts.username is not None:
            token = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
            self.headers["Authorization"] = "Basic " + base64.b64encode(token.encode()).decode()
            parts = parts._replace(netloc=parts.netloc.rpartition("@")[2])
        self.url = urllib.parse.urlunsplit(parts)
        self.timeout = timeout

    def send(self, alert: Alert) -> None:
        request = urllib.request.Request(
            self.url, data=json.dumps(alert.to_json(), default=str).encode(), method="POST", headers=self.headers)
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            if not 200 <= response.status < 300:
                raise OSError(f"webhook answered HTTP {response.status}")


class EmailNotifier:
    """Mails the alert through a sender (in Airflow: the SMTP connection)."""

    name = "email"

    def __init__(self, recipients: list[str], sender: EmailSender) -> None:
        self.recipients = recipients
        self.sender = sender

    def send(self, alert: Alert) -> None:
        subject = f"[streamwarden {alert.severity}] {alert.summary}"[:200]
        body = "<pre>" + alert.text().replace("&", "&amp;").replace("<", "&lt;") + "</pre>"
        self.sender(self.recipients, subject, body)


def step_failed_alert(dag_id: str, label: str, failure: dict[str, Any], *, source: str, task: str,
                      actions: Mapping[str, str], default_action: str) -> Alert:
    """The alert for a DAG step that could not finish (``failure``: a failure document's JSON): its class,
    the document as evidence, and the action ``actions`` gives for the class (else ``default_action``)."""
    failure_class = str(failure.get("failure_class") or "BUG")
    return Alert("critical", f"{dag_id}: {task} failed ({failure_class}): {failure.get('message', '')}"[:300],
                 {"label": f"{label}({failure_class})", "task": task}, failure_class, failure, {},
                 actions.get(failure_class, default_action), source=source)


def dispatch(alert: Alert, backends: Sequence[Notifier], record: Path) -> dict[str, str]:
    """Send through every back-end (one failing does not stop the others) and append the record."""
    outcome: dict[str, str] = {}
    for backend in backends:
        try:
            backend.send(alert)
            outcome[backend.name] = "sent"
        except Exception as exc:  # a broken back-end must not swallow the alert
            outcome[backend.name] = scrub(f"failed: {type(exc).__name__}: {exc}")
    record.parent.mkdir(parents=True, exist_ok=True)
    with open(os.open(record, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "a") as handle:
        handle.write(json.dumps({**alert.to_json(), "deliveries": outcome}, default=str, sort_keys=True) + "\n")
    return outcome


def already_sent(record: Path, key: str) -> bool:
    """True when an alert with this cause key is recorded."""
    return any(a.get("key") == key for a in read_alerts(record))


def read_alerts(record: Path) -> list[dict[str, Any]]:
    """Every recorded alert, oldest first."""
    try:
        lines = record.read_text().splitlines()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in lines if line.strip()]
