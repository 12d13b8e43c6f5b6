"""Alert back-ends: a real loopback webhook receiver, the log, e-mail through a sender; every alert recorded."""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from streamwarden.warden.alerts import (
    Alert,
    EmailNotifier,
    LogNotifier,
    WebhookNotifier,
    already_sent,
    dispatch,
    notifiers,
    read_alerts,
)
from streamwarden.warden.settings import load_warden_settings

VERDICT = {"label": "FAILED(INTEGRITY)", "overall": "FAILED", "failure_class": "INTEGRITY",
           "failure": {"failure_class": "INTEGRITY", "message": "gap", "topic": "t", "partition": 1, "offset": 7,
                       "occurred_at": "2026-01-01T00:00:00+00:00"},
           "last_batch_id": 12, "last_progress_at": "2026-01-01T00:00:00+00:00", "heartbeat_age_s": 3.0,
           "total_lag": 40, "max_lag": 30}


class Receiver(HTTPServer):
    received: list[dict[str, Any]]
    status: int


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        assert self.headers["Content-Type"] == "application/json"
        self.server.received.append(json.loads(body))
        self.send_response(self.server.status)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def receiver() -> Iterator[Receiver]:
    """A real HTTP server on a loopback port that keeps the JSON bodies it is POSTed."""
    server = Receiver(("127.0.0.1", 0), _Handler)
    server.received, server.status = [], 204
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_every_backend_gets_the_alert_and_a_broken_one_does_not_hide_it(
        receiver: Receiver, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    mails: list[tuple[list[str], str, str]] = []
    alert = Alert.from_verdict("critical", "INTEGRITY failure", VERDICT, "check the producer, then force_restart",
                               source="stream_supervisor/run1", key="failure@2026-01-01T00:00:00+00:00")
    url = f"http://127.0.0.1:{receiver.server_port}/hook"
    backends = [LogNotifier(logging.getLogger("test.alerts")), WebhookNotifier(url),
                WebhookNotifier(f"http://127.0.0.1:{_closed_port()}/down", timeout=2),
                EmailNotifier(["oncall@example.org"], lambda to, subject, html: mails.append((to, subject, html)))]
    record = tmp_path / "run" / "alerts.jsonl"
    with caplog.at_level(logging.WARNING, "test.alerts"):
        outcome = dispatch(alert, backends, record)

    assert outcome["log"] == outcome["email"] == "sent"
    assert outcome["webhook"].startswith("failed: URLError"), "the second webhook (closed port) failed"
    [posted] = receiver.received
    assert posted["verdict"]["label"] == "FAILED(INTEGRITY)" and posted["failure_class"] == "INTEGRITY"
    assert posted["failure"]["offset"] == 7 and posted["last_progress"]["last_batch_id"] == 12
    assert posted["next_action"] == "check the producer, then force_restart"
    assert "next action: check the producer" in caplog.text
    [(to, subject, html)] = mails
    assert to == ["oncall@example.org"] and "INTEGRITY failure" in subject and "FAILED(INTEGRITY)" in html
    [recorded] = read_alerts(record)
    assert recorded["deliveries"] == outcome and recorded["summary"] == "INTEGRITY failure"
    assert already_sent(record, "failure@2026-01-01T00:00:00+00:00") and not already_sent(record, "other")


def test_webhook_error_status_is_a_failed_delivery(receiver: Receiver, tmp_path: Path) -> None:
    receiver.status = 500
    alert = Alert.from_verdict("warning", "degraded", VERDICT, "watch the lag")
    outcome = dispatch(alert, [WebhookNotifier(f"http://127.0.0.1:{receiver.server_port}/")], tmp_path / "a.jsonl")
    assert outcome["webhook"].startswith("failed: HTTPError")


def test_backends_follow_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    logger = logging.getLogger("test.alerts")
    assert [n.name for n in notifiers(load_warden_settings(), logger, lambda *a: None)] == ["log"]
    monkeypatch.setenv("STREAMWARDEN_WARDEN_WEBHOOK_URL", "http://127.0.0.1:9/hook")
    monkeypatch.setenv("STREAMWARDEN_WARDEN_EMAIL_TO", "a@example.org, b@example.org")
    found = notifiers(load_warden_settings(), logger, lambda *a: None)
    assert [n.name for n in found] == ["log", "webhook", "email"]
    assert isinstance(found[2], EmailNotifier) and found[2].recipients == ["a@example.org", "b@example.org"]
