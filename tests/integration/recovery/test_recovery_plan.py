"""A recovery's Params and its plan, against tables the real DeltaSink committed and the real broker."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from deltalake import DeltaTable

from fixtures.stream_output import commit_batch, settings_for
from fixtures.stream_process import produce_raw
from streamwarden.atomic import write_json_atomic
from streamwarden.dashboard.series import history_rate
from streamwarden.failures import ConfigError
from streamwarden.local.broker import LocalBroker
from streamwarden.recovery.plan import RecoveryPlan, make_plan
from streamwarden.recovery.request import RecoveryRequest, Target, request_from_params
from streamwarden.runfiles.heartbeat import Heartbeat, write_heartbeat
from streamwarden.settings import Settings
from streamwarden.tables.location import QUARANTINE, SESSION_ROWS, TableLocation
from streamwarden.validation.report import LAST_VALIDATED

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def test_every_bad_param_is_named_at_once(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, topic_pattern="sites-.*")
    with pytest.raises(ConfigError) as caught:
        request_from_params({"target": "offsets", "versions": {"session_rows": 3},
                             "offsets": {"other-1": {"0": 5}, "sites-1": {"x": 1, "2": -4}}, "dry_run": "no"},
                            settings)
    message = str(caught.value)
    for named in ("Param versions: given, but target is offsets", "'other-1' is not a topic of this stream",
                  "sites-1 partition 'x' is not a partition number", "sites-1[2] must be an offset (0 or more), got -4",
                  "Param dry_run"):
        assert named in message, message
    with pytest.raises(ConfigError, match=r"no version for quarantine.*|'events' is not a table"):
        request_from_params({"target": "versions", "versions": {"session_rows": 2, "events": 1}}, settings)
    with pytest.raises(ConfigError, match="'restore' is not one of last_validated, versions, as_of, offsets"):
        request_from_params({"target": "restore"}, settings)
    default = request_from_params({}, settings)
    assert (default.target, default.dry_run) == (Target.LAST_VALIDATED, True)
    assert RecoveryRequest.from_json(default.to_json()) == default


@pytest.fixture()
def stream(tmp_path: Path, broker: LocalBroker, topic_factory: Callable[..., list[str]]
           ) -> tuple[Settings, str, dict[int, int], int]:
    """Two batches committed to both tables: the first half of every partition, then the rest. The version of
    ``session_rows`` after the first."""
    (topic,) = topic_factory(1, partitions=2)
    ends = produce_raw(broker.bootstrap_servers, [topic], 400)[topic]
    settings = settings_for(tmp_path, bootstrap_servers=broker.bootstrap_servers, topic_pattern=topic)
    first = commit_batch(settings, {topic: {p: (0, e // 2) for p, e in ends.items()}}, 0)
    commit_batch(settings, {topic: {p: (e // 2, e) for p, e in ends.items()}}, 1)
    return settings, topic, ends, first[SESSION_ROWS]


def test_the_plan_names_the_versions_rows_and_offsets_undone_and_what_is_replayed(
        stream: tuple[Settings, str, dict[int, int], int]) -> None:
    settings, topic, ends, first = stream
    request = request_from_params({"target": "versions", "versions": {SESSION_ROWS: first, QUARANTINE: first}},
                                  settings)
    plan = make_plan(settings, request, recovery_id="r1", now=NOW)
    assert [(t.table, t.newest, t.target) for t in plan.tables] == [(QUARANTINE, 2, first), (SESSION_ROWS, 2, first)]
    undone = {p: [(e // 2, e)] for p, e in ends.items()}
    assert all(t.undone == {topic: undone} for t in plan.tables)
    rows = {t.table: t.rows_undone for t in plan.tables}
    quarantined = sum(1 for p, e in ends.items() for o in range(e // 2, e) if o % 5 == 0)
    assert rows == {QUARANTINE: quarantined, SESSION_ROWS: 3 * (sum(e - e // 2 for e in ends.values()) - quarantined)}
    assert [(p.partition, p.resume, p.log_start, p.log_end, p.replayed, p.lost) for p in plan.partitions] == [
        (p, e // 2, 0, e, e - e // 2, 0) for p, e in sorted(ends.items())]
    assert plan.resume_offsets() == {topic: {str(p): e // 2 for p, e in ends.items()}}
    assert plan.lost == 0 and plan.estimated_s is not None, "no heartbeat: the Delta history's rate"
    assert f"| {topic} | 0 | {ends[0] // 2:,} |" in plan.text()
    assert RecoveryPlan.from_json(plan.to_json()) == plan


def test_an_offsets_target_leaves_the_tables_and_counts_what_it_skips(
        stream: tuple[Settings, str, dict[int, int], int]) -> None:
    settings, topic, ends, _ = stream
    request = request_from_params({"target": "offsets", "offsets": {topic: {"0": ends[0]}}}, settings)
    plan = make_plan(settings, request, recovery_id="r2", now=NOW)
    assert plan.tables == () and plan.lost == 0 and plan.replayed == 0  # at the tables' end: nothing to do
    with pytest.raises(ConfigError, match=rf"{topic}\[0\]@{ends[0] + 1} is past the partition's log end"):
        make_plan(settings, request_from_params({"target": "offsets", "offsets": {topic: {"0": ends[0] + 1}}},
                                                settings), recovery_id="r3", now=NOW)
    with pytest.raises(ConfigError, match=rf"no partition {topic}\[7\] on the broker"):
        make_plan(settings, request_from_params({"target": "offsets", "offsets": {topic: {"7": 0}}}, settings),
                  recovery_id="r4", now=NOW)


def test_without_a_passing_validation_the_default_target_is_refused_and_a_missing_version_is_named(
        stream: tuple[Settings, str, dict[int, int], int]) -> None:
    settings, _, _, _ = stream
    with pytest.raises(ConfigError, match="no validated version of session_rows, quarantine yet"):
        make_plan(settings, request_from_params({}, settings), recovery_id="r5", now=NOW)
    with pytest.raises(ConfigError, match="has no version 9: its newest is 2"):
        make_plan(settings, request_from_params({"target": "versions", "versions": {SESSION_ROWS: 9,
                                                                                   QUARANTINE: 1}}, settings),
                  recovery_id="r6", now=NOW)


def test_the_default_target_is_each_tables_last_validated_version(
        stream: tuple[Settings, str, dict[int, int], int]) -> None:
    settings, topic, ends, first = stream
    folder = settings.run_paths.validation
    folder.mkdir(parents=True)
    write_json_atomic(folder / LAST_VALIDATED, {"tables": {SESSION_ROWS: {"version": first},
                                                           QUARANTINE: {"version": 2}}})
    request = request_from_params({"reason": "INTEGRITY at 03:12"}, settings)
    plan = make_plan(settings, request, recovery_id="r7", now=NOW)
    assert {t.table: t.target for t in plan.tables} == {SESSION_ROWS: first, QUARANTINE: 2}
    assert plan.resume_offsets() == {topic: {str(p): e // 2 for p, e in ends.items()}}, "the least any table holds"
    assert plan.text().startswith("**Recovery r7** to the last validated versions (INTEGRITY at 03:12)")


def test_the_replay_time_takes_the_last_measured_rate_when_the_heartbeat_has_none(
        stream: tuple[Settings, str, dict[int, int], int]) -> None:
    """A stream that stopped, or whose restart died before its first batch, leaves a heartbeat without a rate:
    the replay is timed at the last rate the Delta history's stream commits show, and the plan says so."""
    settings, _, _, first = stream
    request = request_from_params({"target": "versions", "versions": {SESSION_ROWS: first, QUARANTINE: first}},
                                  settings)
    write_heartbeat(settings.run_paths.heartbeat, Heartbeat("started", "q", "r", 1, trigger_interval_s=3.0))
    measured = history_rate(DeltaTable(TableLocation.of(settings, SESSION_ROWS).uri).history())
    assert measured is not None

    plan = make_plan(settings, request, recovery_id="r8", now=NOW)

    assert plan.rate == measured.records_per_second
    assert plan.estimated_s == pytest.approx(plan.replayed / measured.records_per_second)
    assert "from session_rows's Delta history" in plan.text() and "the heartbeat (started) has none" in plan.text()
    assert "no measured rate" not in plan.text() and f"about {plan.estimated_s:,.0f} s at" in plan.text()

    write_heartbeat(settings.run_paths.heartbeat, Heartbeat("progress", "q", "r", 1, batch_id=41,
                                                       processed_rows_per_second=1800.0))
    plan = make_plan(settings, request, recovery_id="r9", now=NOW)
    assert plan.rate == 1800.0 and "1,800 records/s, batch 41 at" in plan.text(), "the heartbeat's, when it has one"


def test_without_a_rate_anywhere_the_replay_time_is_unknown_and_says_why(
        tmp_path: Path, broker: LocalBroker, topic_factory: Callable[..., list[str]]) -> None:
    (topic,) = topic_factory(1, partitions=1)
    ends = produce_raw(broker.bootstrap_servers, [topic], 50)[topic]
    settings = settings_for(tmp_path, bootstrap_servers=broker.bootstrap_servers, topic_pattern=topic)
    commit_batch(settings, {topic: {p: (0, e) for p, e in ends.items()}}, 0)  # one commit: no rate in it
    plan = make_plan(settings, request_from_params({"target": "offsets", "offsets": {topic: {"0": 0}}}, settings),
                     recovery_id="r10", now=NOW)
    assert plan.rate is None and plan.estimated_s is None
    assert ("time unknown (no measured rate: the heartbeat has none, and session_rows's Delta history holds no two "
            "stream commits close together)") in plan.text()
