"""Durations in reports and alerts read as people say them, seconds kept below an hour."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from streamwarden.durations import duration_text
from streamwarden.session_restarts.alerting import exposure_alert
from streamwarden.session_restarts.sessions import SiteSessions


@pytest.mark.parametrize(("seconds", "text"), [
    (None, "-"), (0, "0s"), (59.9, "59s"), (90, "1m 30s"), (139, "2m 19s"), (3600, "1h"), (7260, "2h 1m"),
    (90000, "1d 1h")])
def test_a_duration_reads_in_days_hours_minutes_and_seconds_below_an_hour(seconds: float | None, text: str) -> None:
    assert duration_text(seconds) == text


def test_an_exposure_of_139_s_over_a_limit_of_90_s_reads_as_such_not_as_two_minutes_each() -> None:
    now = datetime(2026, 11, 27, 12, tzinfo=UTC)
    site = SiteSessions("sites-0", 3, 0, now - timedelta(seconds=139), None)
    alert = exposure_alert([site], limit=90, now=now, source="x", report_path=None)
    assert "beyond 1m 30s" in alert.summary and alert.failure is not None
    (evidence,) = alert.failure["evidence"]
    assert evidence.endswith("2m 19s ago (limit 1m 30s); 3 open, 0 damaged")
