"""Session restarts without a stream: Params, schedules, the jittered plan, what the tables say, the alerts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path

import duckdb
import pytest

from fixtures.site_tables import DEAD, NOW, ROWS, minutes_ago
from streamwarden import schedules
from streamwarden.atomic import write_json_atomic
from streamwarden.control.commands import decode_command, encode_command
from streamwarden.failures import ConfigError
from streamwarden.session_restarts.alerting import EXPOSURE, UNANSWERED, exposure_alert, unanswered_alert
from streamwarden.session_restarts.plan import RestartPlan, SiteTurn, choose_sites, make_plan
from streamwarden.session_restarts.report import RestartReport, previous_restarts
from streamwarden.session_restarts.request import SCHEDULED_REASON, request_from_params
from streamwarden.session_restarts.sessions import find_answers, measure_losses, measure_sites
from streamwarden.session_restarts.settings import load_restart_settings
from streamwarden.settings import load_settings
from streamwarden.settings_loading import SettingsError

SITES = [f"sites-{i}" for i in range(50)]


def test_a_run_counts_losses_from_each_sites_own_last_restart_not_from_when_the_last_run_was_planned(
        tmp_path: Path) -> None:
    def run(planned: float, *turns: tuple[str, float]) -> RestartPlan:
        return RestartPlan(f"run-{planned}", minutes_ago(planned), "scheduled", tuple(
            SiteTurn(site, f"{site}-{planned}", minutes_ago(turn), minutes_ago(turn - 10)) for site, turn in turns))

    older = run(120, ("sites-0", 119), ("sites-1", 118))
    newer = run(60, ("sites-0", 58), ("sites-1", 55))
    answered = {"sites-0-60": {"opened_at": minutes_ago(57.5).isoformat()}}  # sites-1 never answered
    write_json_atomic(tmp_path / "20261124T100000.000000Z.json", {"plan": older.to_json(), "answers": {}})
    write_json_atomic(tmp_path / "20261124T110000.000000Z.json", {"plan": newer.to_json(), "answers": answered})

    assert previous_restarts(tmp_path, NOW) == {"sites-0": minutes_ago(57.5), "sites-1": minutes_ago(55)}
    assert previous_restarts(tmp_path, minutes_ago(90)) == {"sites-0": minutes_ago(119), "sites-1": minutes_ago(118)}
    assert previous_restarts(tmp_path / "none", NOW) == {}


def test_every_bad_param_is_named_at_once_and_nothing_is_defaulted_silently() -> None:
    settings, restarts = load_settings(), load_restart_settings()
    with pytest.raises(ConfigError) as caught:
        request_from_params({"sites": ["sites-1", "other-1", "bad name"], "pattern": "([", "jitter": "soon",
                             "deadline": "-3"}, settings, restarts)
    message = str(caught.value)
    for named in ("'other-1' is not a site of this stream", "'bad name' is not a valid Kafka topic name",
                  "Param pattern: '([' is not a valid regular expression", "Param jitter", "Param deadline"):
        assert named in message, message
    request = request_from_params({}, settings, restarts)
    assert (request.sites, request.pattern, request.reason) == ((), None, SCHEDULED_REASON)
    assert (request.jitter, request.deadline) == (restarts.jitter, restarts.deadline)
    with pytest.raises(ConfigError, match="give one of them"):
        request_from_params({"sites": ["sites-1"], "pattern": "sites-.*"}, settings, restarts)


def test_schedules_give_the_widest_gap_between_runs_and_bad_ones_name_the_variable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert schedules.interval("90s") == 90
    assert schedules.interval("@hourly") == 3600
    assert schedules.interval("0 9 * * 1-5", datetime(2026, 11, 23, tzinfo=UTC)) == 3 * 24 * 3600  # the weekend
    assert schedules.interval("none") is None
    monkeypatch.setenv("STREAMWARDEN_SESSION_RESTART_SCHEDULE", "61 * * * *")
    with pytest.raises(SettingsError, match=r"STREAMWARDEN_SESSION_RESTART_SCHEDULE.*not a valid cron"):
        load_restart_settings()
    monkeypatch.setenv("STREAMWARDEN_SESSION_RESTART_SCHEDULE", "2m")
    assert load_restart_settings().exposure_limit == 180


def test_fifty_sites_get_evenly_spread_turns_in_an_order_shuffled_per_run() -> None:
    request = request_from_params({"jitter": "5m", "deadline": "2m", "reason": "drill"}, load_settings(),
                                  load_restart_settings())
    plan = make_plan(request, choose_sites(request, SITES), run_key="run-1", now=NOW)
    turns = [t.not_before for t in plan.turns]
    assert sorted({t.site for t in plan.turns}) == sorted(SITES)
    assert turns == sorted(turns) and turns[0] == NOW
    assert {b - a for a, b in pairwise(turns)} == {timedelta(seconds=6)}
    assert all(t.deadline - t.not_before == timedelta(minutes=2) for t in plan.turns)
    assert plan.deadline == NOW + timedelta(seconds=6 * 49 + 120)
    other = make_plan(request, SITES, run_key="run-2", now=NOW)
    assert [t.site for t in other.turns] != [t.site for t in plan.turns]
    assert len({t.request_id for t in plan.turns}) == 50
    for command in plan.commands():
        assert decode_command(command.key, encode_command(command)) == command
        assert command.reason == "drill"


def test_sites_named_but_absent_from_the_broker_are_refused_by_name() -> None:
    request = request_from_params({"sites": ["sites-7", "sites-70"]}, load_settings(), load_restart_settings())
    with pytest.raises(ConfigError, match="no topic sites-70 on the broker"):
        choose_sites(request, SITES[:10])
    pattern = request_from_params({"pattern": "sites-9.*"}, load_settings(), load_restart_settings())
    assert choose_sites(pattern, SITES[:10]) == ["sites-9"]
    with pytest.raises(ConfigError, match="no site to restart"):
        choose_sites(pattern, SITES[:5])


def test_exposure_is_the_age_of_the_oldest_open_sessions_clean_start() -> None:
    with duckdb.connect() as con:
        sites = measure_sites(con, ROWS, DEAD, now=NOW, session_timeout=300 * 60)
    # sites-0: "old" open since 200 min; "ended" is closed; "healed" restarted clean by its resync snapshot.
    assert (sites["sites-0"].open_sessions, sites["sites-0"].damaged_sessions) == (2, 0)
    assert sites["sites-0"].exposure(NOW) == 200 * 60
    # sites-1: the damaged session (a gap after its start) is open and counts from its start.
    assert (sites["sites-1"].open_sessions, sites["sites-1"].damaged_sessions) == (2, 1)
    assert sites["sites-1"].exposure(NOW) == 50 * 60
    # sites-2: silent longer than the session timeout, so released: only its newest start counts.
    assert sites["sites-2"].open_sessions == 0 and sites["sites-2"].exposure(NOW) == 400 * 60
    # sites-3: its end went to quarantine, which still closes the session.
    assert sites["sites-3"].open_sessions == 0


def test_losses_count_integrity_dead_letters_since_the_previous_restart_and_answers_name_the_request() -> None:
    with duckdb.connect() as con:
        losses = measure_losses(con, DEAD, {"sites-0": minutes_ago(37)})
        answers = find_answers(con, ROWS, ["restart-1", "restart-2"])
    assert (losses["sites-0"].records, losses["sites-0"].offsets) == (1, ((0, 8, 8),))
    assert (losses["sites-1"].records, losses["sites-1"].sessions) == (2, 1)  # INVALID_JSON is not a break
    assert losses["sites-1"].span_s == 60
    assert list(answers) == ["restart-1"]
    assert (answers["restart-1"].site, answers["restart-1"].offset) == ("sites-1", 8)


def test_a_site_that_did_not_answer_by_its_deadline_is_alerted_with_its_last_clean_start() -> None:
    request = request_from_params({"jitter": "0", "deadline": "1m"}, load_settings(), load_restart_settings())
    plan = make_plan(request, ["sites-0", "sites-1"], run_key="r", now=minutes_ago(10))
    with duckdb.connect() as con:
        sites = measure_sites(con, ROWS, DEAD, now=NOW, session_timeout=300 * 60)
        answers = find_answers(con, ROWS, [t.request_id for t in plan.turns])
    answered = {plan.turns[1].request_id: next(iter(find_answers(duckdb.connect(), ROWS, ["restart-1"]).values()))}
    report = RestartReport(plan, NOW, answers | answered, sites, {}, 60 * 60 * 1.5)
    assert [t.site for t in report.unanswered()] == [plan.turns[0].site]
    alert = unanswered_alert(report, source="restart_sessions/r", report_path="/r.json")
    assert alert.failure_class == UNANSWERED and plan.turns[0].site in alert.summary
    assert plan.turns[1].site not in alert.summary
    assert alert.failure is not None and "last clean session start" in alert.failure["evidence"][0]
    assert '"sites": ["' + plan.turns[0].site + '"]' in alert.next_action
    over = report.overexposed()
    assert [s.site for s in over] == ["sites-0", "sites-2"]
    exposed = exposure_alert(over, limit=5400, now=NOW, source="x", report_path=None)
    assert exposed.failure_class == EXPOSURE and exposed.severity == "warning"
    assert exposed.key == exposure_alert(over, limit=5400, now=NOW + timedelta(hours=1), source="y",
                                         report_path="z").key  # the same exposure alerts once
    assert "sites-0" in report.text() and "NO (deadline passed)" in report.text()
