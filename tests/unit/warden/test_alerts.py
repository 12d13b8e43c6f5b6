"""Alert back-ends: a real loopback webhook receiver, the log, e-mail through a sender; every alert recorded."""

from __future__ import annotations

import json
import logging
import socket
from pathlib import Path
from typing import Any

import pytest

from fixtures.webhook import Receiver
from streamwarden.alerts import Alert, EmailNotifier, LogNotifier, WebhookNotifier, already_sent, dispatch, read_alerts
from streamwarden.failures import FailureClass, FailureDocument
from streamwarden.recovery.request import Target, request_from_params
from streamwarden.settings import load_settings
from streamwarden.warden.alerts import notifiers
from streamwarden.warden.decision import RECOVERY, Action, decide
from streamwarden.warden.health import HealthVerdict, Overall
from streamwarden.warden.restart_policy import RestartHistory
from streamwarden.warden.settings import load_warden_settings

VERDICT = {"label": "FAILED(INTEGRITY)", "overall": "FAILED", "failure_class": "INTEGRITY",
           "failure": {"failure_class": "INTEGRITY", "message": "gap", "topic": "t", "partition": 1, "offset": 7,
                       "occurred_at": "2026-01-01T00:00:00+00:00"},
           "last_batch_id": 12, "last_progress_at": "2026-01-01T00:00:00+00:00", "heartbeat_age_s": 3.0,
           "total_lag": 40, "max_lag": 30}


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


# -- the escalation's next action: recover_stream with Params to paste --------------------------------------------
def _escalation(failure: FailureDocument) -> Alert:
    """The alert stream_supervisor sends for a failed stream: decide(), then an alert from its decision."""
    verdict = HealthVerdict(Overall.FAILED, ["failed"], "2026-01-01T00:00:00+00:00", failure=failure)
    decision = decide(verdict, RestartHistory(), load_warden_settings(), 0.0)
    assert decision.action is Action.ESCALATE
    return Alert.from_verdict(decision.severity, decision.reason, verdict.to_json(), decision.next_action)


def recover_stream_params(next_action: str) -> dict[str, Any]:
    """The JSON after "recover_stream" (and "with Params") in a next action, parsed as the trigger form would."""
    head, _, rest = next_action.partition("recover_stream ")
    assert head, f"recover_stream is not named in {next_action!r}"
    params, _ = json.JSONDecoder().raw_decode(rest.removeprefix("with Params "))
    assert isinstance(params, dict)
    return params


def test_data_loss_names_recover_stream_resuming_at_the_earliest_offset_kafka_holds(tmp_path: Path) -> None:
    failure = FailureDocument(FailureClass.DATA_LOSS, "next offset 1000 is expired by retention; available [1200, "
                              "5000)", 81, "sites-0", 0, 1000, {"expected": 1000, "available": [1200, 5000]})
    alert = _escalation(failure)
    params = recover_stream_params(alert.next_action)
    assert params == {"target": "offsets", "offsets": {"sites-0": {"0": 1200}}, "dry_run": True,
                      "reason": "DATA_LOSS at sites-0[0]: next offset 1000 is expired by retention; available "
                                "[1200, 5000)"}
    assert "recover_stream with Params" in alert.text() and "recoveries.jsonl" in alert.next_action
    request = request_from_params(params, load_settings(home=tmp_path))  # what the trigger form's run checks
    assert (request.target, request.offsets, request.dry_run) == (Target.OFFSETS, {"sites-0": {0: 1200}}, True)


@pytest.mark.parametrize("failure", [
    FailureDocument(FailureClass.DATA_LOSS, "topic-partition sites-9[2] no longer exists (last position 40)", 81,
                    "sites-9", 2, 40),  # a deleted topic (strict tier): nothing Kafka still holds
    FailureDocument(FailureClass.DATA_LOSS, "lost", 81, details={"available": "?"}),
])
def test_data_loss_without_available_offsets_names_a_dry_run_roll_back(failure: FailureDocument,
                                                                      tmp_path: Path) -> None:
    params = recover_stream_params(_escalation(failure).next_action)
    assert params["target"] == "last_validated" and params["dry_run"] is True
    assert params["reason"].startswith("DATA_LOSS") and failure.message in params["reason"]
    assert request_from_params(params, load_settings(home=tmp_path)).target is Target.LAST_VALIDATED


@pytest.mark.parametrize(("failure_class", "kept"), [
    (FailureClass.INTEGRITY, "STREAMWARDEN_ON_GAP=resync"),
    (FailureClass.MALFORMED, "STREAMWARDEN_MALFORMED_POLICY=quarantine"),
])
def test_integrity_and_malformed_keep_their_advice_and_offer_a_roll_back(failure_class: FailureClass, kept: str,
                                                                         tmp_path: Path) -> None:
    alert = _escalation(FailureDocument(failure_class, "bad", 82, "sites-0", 1, 7))
    assert kept in alert.next_action and "force_restart=true" in alert.next_action
    assert alert.next_action == f"no automatic restart. {RECOVERY[failure_class]}"
    params = recover_stream_params(alert.next_action)
    assert params == {"target": "last_validated", "dry_run": True}
    assert request_from_params(params, load_settings(home=tmp_path)).target is Target.LAST_VALIDATED


@pytest.mark.parametrize("failure_class", [FailureClass.CONFIG, FailureClass.BUG])
def test_config_and_bug_name_no_recovery(failure_class: FailureClass) -> None:
    assert "recover_stream" not in _escalation(FailureDocument(failure_class, "x", 70)).next_action
