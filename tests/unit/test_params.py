"""The Params the manual DAGs share, checked one way everywhere: ``as_of`` in validate_output and recover_stream."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from streamwarden.params import as_of_param


@pytest.mark.parametrize(("given", "expected"), [
    ("2026-11-24T03:00:00Z", datetime(2026, 11, 24, 3, tzinfo=UTC)),
    ("2026-11-24T03:00:00", datetime(2026, 11, 24, 3, tzinfo=UTC)),  # no zone: UTC
    ("2026-11-24T04:00:00+01:00", datetime(2026, 11, 24, 3, tzinfo=UTC)),
    (None, None), ("", None)])
def test_an_as_of_is_a_utc_time_or_none(given: str | None, expected: datetime | None) -> None:
    problems: list[str] = []
    assert as_of_param(given, problems) == expected and problems == []


@pytest.mark.parametrize(("given", "required", "says"), [
    ("yesterday", False, "Param as_of: expected an ISO 8601 time such as 2026-11-24T03:00:00Z, got 'yesterday'"),
    (None, True, "Param as_of: required with target as_of"),
    ("", True, "Param as_of: required with target as_of")])
def test_a_bad_or_missing_as_of_is_named(given: str | None, required: bool, says: str) -> None:
    problems: list[str] = []
    assert as_of_param(given, problems, required=required) is None
    assert len(problems) == 1 and problems[0].startswith(says)


def test_a_future_as_of_is_refused_the_same_way_for_each_dag() -> None:
    future = datetime.now(UTC) + timedelta(hours=1)
    problems: list[str] = []
    assert as_of_param(future.isoformat(), problems) is None
    assert problems == [f"Param as_of: {future.isoformat()} is in the future"]
