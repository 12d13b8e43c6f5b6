"""A missing answer told apart, on a real broker and a checkpoint as Spark writes it: the site did not answer, or
the stream had not read that far (not running, or behind), and the alert that follows from each."""

from __future__ import annotations

import json
import os
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from fixtures.stream_process import produce_raw
from streamwarden.dashboard.alerts_now import dag_actions
from streamwarden.dashboard.model import Sites
from streamwarden.dashboard.page import sites_card
from streamwarden.dashboard.sites_now import last_restart_run
from streamwarden.kafka.admin import create_topics
from streamwarden.local.broker import LocalBroker
from streamwarden.session_restarts import steps
from streamwarden.session_restarts.alerting import UNANSWERED, unanswered_alert, unread_alert
from streamwarden.session_restarts.plan import RestartPlan, make_plan
from streamwarden.session_restarts.reach import Cause, reach, stream_during
from streamwarden.session_restarts.request import request_from_params
from streamwarden.session_restarts.settings import RestartSettings, load_restart_settings
from streamwarden.settings import Settings, load_settings

RESTARTS: RestartSettings = load_restart_settings(schedule="none")


def _checkpoint(settings: Settings, offsets: dict[str, dict[int, int]], committed_at: float) -> None:
    """Batch 0 committed at ``offsets``, its commit file dated ``committed_at``."""
    folder = settings.checkpoint_location
    (folder / "offsets").mkdir(parents=True, exist_ok=True)
    (folder / "commits").mkdir(exist_ok=True)
    document = {topic: {str(p): o for p, o in parts.items()} for topic, parts in offsets.items()}
    (folder / "offsets" / "0").write_text(f'v1\n{{"batchWatermarkMs":0}}\n{json.dumps(document)}\n')
    commit = folder / "commits" / "0"
    commit.write_text('v1\n{"nextBatchWatermarkMs":0}\n')
    os.utime(commit, (committed_at, committed_at))


@pytest.fixture()
def sites(tmp_path: Path, broker: LocalBroker) -> tuple[Settings, RestartPlan, dict[str, dict[int, int]]]:
    """Two sites; both asked to restart with a deadline after their first records; then ``s1`` writes more (after
    the deadline), ``s0`` nothing. The log ends at the deadline, per site and partition."""
    prefix = f"r{uuid.uuid4().hex[:8]}"
    s0, s1 = f"{prefix}-s0", f"{prefix}-s1"
    settings = load_settings(home=tmp_path / "home", output_root=tmp_path / "out",
                             bootstrap_servers=broker.bootstrap_servers, topic_pattern=f"{prefix}-.*")
    create_topics({"bootstrap.servers": broker.bootstrap_servers}, [s0, s1], partitions=2)
    at_deadline = produce_raw(broker.bootstrap_servers, [s0, s1], 200)
    deadline = datetime.now(UTC)
    time.sleep(0.05)
    produce_raw(broker.bootstrap_servers, [s1], 100)
    request = request_from_params({"jitter": "0", "deadline": "30s"}, settings, RESTARTS)
    plan = make_plan(request, [s0, s1], run_key="drill", now=deadline - timedelta(seconds=30))
    return settings, plan, at_deadline


def test_a_stopped_stream_is_blamed_for_the_answer_it_did_not_read_and_a_silent_site_for_its_own(
        sites: tuple[Settings, RestartPlan, dict[str, dict[int, int]]]) -> None:
    settings, plan, at_deadline = sites
    s0, s1 = sorted(at_deadline)
    half = {p: end // 2 for p, end in at_deadline[s0].items()}
    # the stream read s1 up to the deadline, s0 only half of it, and committed nothing after the deadline
    _checkpoint(settings, {s0: half, s1: at_deadline[s1]}, committed_at=plan.deadline.timestamp() - 20)

    report, path = steps.report(settings, RESTARTS, plan, now=plan.deadline + timedelta(seconds=5))

    by_site = {t.site: t for t in plan.turns}
    assert report.cause(by_site[s0]) is Cause.STREAM_NOT_RUNNING
    assert report.cause(by_site[s1]) is Cause.SITE_SILENT
    assert [t.site for t in report.unread()] == [s0] and [t.site for t in report.silent()] == [s1]
    text = report.text()
    assert "UNREAD: stream down" in text and "NO (deadline passed)" in text
    assert "the stream: its last commit: batch 0 at" in text and "no process holds the checkpoint lease" in text

    unread = unread_alert(report, source="restart_sessions/drill", report_path=str(path))
    assert unread.failure_class == "STREAM_NOT_RUNNING" and s0 in unread.summary and s1 not in unread.summary
    assert "the stream was not running" in unread.summary
    assert "collection point" not in unread.next_action and "the sites are not to blame" in unread.next_action
    assert [a.dag_id for a in dag_actions(unread.next_action)] == ["stream_supervisor", "restart_sessions"]
    assert unread.failure is not None
    assert f"{s0}[0]@{half[0]:,} written" in unread.failure["evidence"][0], unread.failure["evidence"]
    assert "in Kafka, unread" in unread.failure["evidence"][0]

    silent = unanswered_alert(report, source="restart_sessions/drill", report_path=str(path))
    assert silent.failure_class == UNANSWERED and s1 in silent.summary and s0 not in silent.summary
    assert "Check each collection point named" in silent.next_action
    assert silent.failure is not None
    assert f"the stream had read every record of {s1} written by the deadline" in silent.failure["evidence"][0]

    shown = last_restart_run(settings)
    assert shown is not None and (shown["unread"], shown["unanswered"]) == ([s0], [s1])
    assert f"not read by the stream (it was not running or behind) {s0}" in sites_card(Sites(None, None, [], shown))
    written = json.loads(path.read_text())
    assert {t["site"]: t["cause"] for t in written["unanswered"]} == {s0: "STREAM_NOT_RUNNING", s1: "SITE_SILENT"}


def test_a_stream_that_committed_after_the_deadline_but_had_not_caught_up_is_behind(
        sites: tuple[Settings, RestartPlan, dict[str, dict[int, int]]]) -> None:
    settings, plan, at_deadline = sites
    s0, s1 = sorted(at_deadline)
    _checkpoint(settings, {s0: {0: 1, 1: 1}, s1: {0: 1, 1: 1}}, committed_at=plan.deadline.timestamp() + 2)

    report, path = steps.report(settings, RESTARTS, plan, now=plan.deadline + timedelta(seconds=5))

    assert {report.cause(t) for t in plan.turns} == {Cause.STREAM_BEHIND} and report.silent() == []
    alert = unread_alert(report, source="restart_sessions/drill", report_path=str(path))
    assert (alert.failure_class, alert.severity) == ("STREAM_BEHIND", "warning")
    assert "the stream was behind" in alert.summary and "lag per partition" in alert.next_action
    assert "UNREAD: stream behind" in report.text()


def test_when_the_broker_cannot_say_where_the_stream_stood_the_site_is_alerted_with_that_caveat(
        sites: tuple[Settings, RestartPlan, dict[str, dict[int, int]]]) -> None:
    settings, plan, _ = sites
    unreachable = settings.model_copy(update={"bootstrap_servers": "127.0.0.1:9"})
    found = reach(unreachable, plan.turns, stream_during(unreachable), timeout=2)
    assert {r.cause for r in found.values()} == {Cause.UNCHECKED}
    assert all("where the stream stood on" in r.evidence() and "unknown" in r.evidence() for r in found.values())


def test_after_the_last_deadline_the_wait_goes_on_only_for_answers_the_stream_has_not_read(
        sites: tuple[Settings, RestartPlan, dict[str, dict[int, int]]]) -> None:
    """A running stream is seconds behind the clock: right after the deadline a site's answer may be in Kafka,
    unread. The sensor keeps waiting (at most ``CATCH_UP``) for exactly those sites."""
    settings, plan, at_deadline = sites
    s0, s1 = sorted(at_deadline)
    after = plan.deadline + timedelta(seconds=1)
    _checkpoint(settings, {s0: {0: 3, 1: 3}, s1: at_deadline[s1]}, committed_at=after.timestamp())
    assert [t.site for t in steps.unread(settings, plan, {}, after)] == [s0]
    assert steps.unread(settings, plan, {}, plan.deadline - timedelta(seconds=1)) == [], "not past the deadline"
    _checkpoint(settings, at_deadline, committed_at=after.timestamp() + 3)  # it caught up: s0 did not answer
    assert steps.unread(settings, plan, {}, after) == []
    assert (RESTARTS.catch_up, load_restart_settings(catch_up="0").catch_up) == (600.0, 0.0)
    assert load_restart_settings(catch_up="2m").catch_up == 120.0
