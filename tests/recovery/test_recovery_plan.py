"""A recovery's Params and its plan, against tables the real DeltaSink committed and the real broker."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from stream_output import commit_batch, settings_for
from streamwarden.atomic import write_json_atomic
from streamwarden.failures import ConfigError
from streamwarden.local.broker import LocalBroker
from streamwarden.recovery.plan import RecoveryPlan, make_plan
from streamwarden.recovery.request import RecoveryRequest, Target, request_from_params
from streamwarden.settings import Settings
from streamwarden.tables.location import QUARANTINE, SESSION_ROWS
from streamwarden.validation.report import LAST_VALIDATED, validation_folder
from support import produce_raw

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
    assert plan.lost == 0 and plan.estimated_s is None and "no measured rate" in plan.text()
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
    folder = validation_folder(settings.root("run"))
    folder.mkdir(parents=True)
    write_json_atomic(folder / LAST_VALIDATED, {"tables": {SESSION_ROWS: {"version": first},
                                                           QUARANTINE: {"version": 2}}})
    request = request_from_params({"reason": "INTEGRITY at 03:12"}, settings)
    plan = make_plan(settings, request, recovery_id="r7", now=NOW)
    assert {t.table: t.target for t in plan.tables} == {SESSION_ROWS: first, QUARANTINE: 2}
    assert plan.resume_offsets() == {topic: {str(p): e // 2 for p, e in ends.items()}}, "the least any table holds"
    assert plan.text().startswith("**Recovery r7** to the last validated versions (INTEGRITY at 03:12)")
