"""The Params of a validation run checked before anything is read, and tables pinned at a version or a time."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from fixtures.stream_output import commit_batch, settings_for
from streamwarden.failures import ConfigError
from streamwarden.tables.location import QUARANTINE, SESSION_ROWS
from streamwarden.tables.ranges import OffsetRanges
from streamwarden.validation.request import Check, Rows, ValidationRequest, default_request, request_from_params
from streamwarden.validation.settings import ValidationSettings
from streamwarden.validation.snapshot import pin

BATCH: OffsetRanges = {"sites-a": {0: (0, 10)}}
LATER: OffsetRanges = {"sites-a": {0: (10, 20)}}


def test_no_params_ask_for_every_table_and_check_the_settings_allow(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    request = request_from_params({}, settings, ValidationSettings())
    assert request == default_request(settings, ValidationSettings())
    assert request.tables == (SESSION_ROWS, QUARANTINE) and request.checks == frozenset(Check)
    assert not request.pinned and request.wants(Check.KAFKA)
    offline = request_from_params({"checks": []}, settings, ValidationSettings(kafka=False))
    assert offline.checks == {Check.COVERAGE, Check.CHECKPOINT, Check.EXPOSURE, Check.EXPECTATIONS, Check.CONTENT}
    assert ValidationRequest.from_json(request.to_json()) == request
    every = request_from_params({"rows": "all"}, settings, ValidationSettings())
    assert request.rows is Rows.NEW and every.rows is Rows.ALL
    assert ValidationRequest.from_json(every.to_json()) == every


def test_pinned_requests_make_only_the_checks_that_read_the_tables(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    request = request_from_params({"versions": {SESSION_ROWS: 3, QUARANTINE: 2}}, settings, ValidationSettings())
    assert request.pinned and request.versions == {SESSION_ROWS: 3, QUARANTINE: 2}
    assert [c for c in Check if request.wants(c)] == [Check.COVERAGE, Check.EXPECTATIONS, Check.CONTENT]
    as_of = request_from_params({"as_of": "2026-01-02T03:04:05"}, settings, ValidationSettings())
    assert as_of.as_of == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC) and as_of.pinned
    assert ValidationRequest.from_json(as_of.to_json()) == as_of


def test_every_bad_param_is_named_at_once(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    future = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    with pytest.raises(ConfigError) as bad:
        request_from_params({"tables": ["records"], "checks": ["coverage", "speed"], "versions": {SESSION_ROWS: -1},
                             "as_of": future, "rows": "every"}, settings, ValidationSettings())
    message = bad.value.message
    assert "Param tables: records not among this pipeline's tables (session_rows, quarantine)" in message
    assert "Param checks: unknown speed" in message
    assert "Param versions: session_rows: expected a table version (a whole number >= 0), got -1" in message
    assert f"Param as_of: {future} is in the future" in message
    assert "Param rows: expected new or all, got 'every'" in message
    with pytest.raises(ConfigError, match="give a version of each of session_rows, quarantine"):
        request_from_params({"versions": {SESSION_ROWS: 1}}, settings, ValidationSettings())
    with pytest.raises(ConfigError, match="versions and as_of: give one of them"):
        request_from_params({"versions": {SESSION_ROWS: 1, QUARANTINE: 1}, "as_of": "2026-01-01T00:00:00Z"},
                            settings, ValidationSettings())


def test_tables_are_pinned_at_a_version_or_as_they_were_at_a_time(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    commit_batch(settings, BATCH, 0)  # versions 0 (created) and 1
    time.sleep(1.1)  # delta-rs resolves a time to the newest commit at or before it, to the millisecond
    between = datetime.now(UTC)
    time.sleep(1.1)
    commit_batch(settings, LATER, 1)  # version 2
    assert {t.name: t.version for t in pin(settings, (SESSION_ROWS, QUARANTINE))} == {SESSION_ROWS: 2, QUARANTINE: 2}
    assert {t.name: t.version for t in pin(settings, (SESSION_ROWS,), {SESSION_ROWS: 1})} == {SESSION_ROWS: 1}
    assert {t.name: t.version for t in pin(settings, (SESSION_ROWS, QUARANTINE), as_of=between)} == {
        SESSION_ROWS: 1, QUARANTINE: 1}
    with pytest.raises(ConfigError, match="session_rows has no version 7: its newest is 2"):
        pin(settings, (SESSION_ROWS,), {SESSION_ROWS: 7})
    with pytest.raises(ConfigError, match="session_rows has no version committed by 2000-01-01"):
        pin(settings, (SESSION_ROWS,), as_of=datetime(2000, 1, 1, tzinfo=UTC))
