"""Checks of the Params the manual DAGs share: ``dry_run`` and ``reason``, and a time ``as_of``.

Example::

    >>> problems: list[str] = []
    >>> dry_and_reason({"dry_run": "no"}, problems)
    (True, '')
    >>> problems
    ["Param dry_run: expected true or false, got 'no'"]
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

MAX_REASON = 500


def dry_run_param(params: Mapping[str, Any], problems: list[str], *, default: bool = True) -> bool:
    """``dry_run`` (``default`` when not given); a value that is not a boolean is added to ``problems`` and the
    default returned."""
    dry_run = params.get("dry_run", default)
    if not isinstance(dry_run, bool):
        problems.append(f"Param dry_run: expected true or false, got {dry_run!r}")
        return default
    return dry_run


def dry_and_reason(params: Mapping[str, Any], problems: list[str]) -> tuple[bool, str]:
    """``dry_run`` (default true: plan or check only) and ``reason`` (text of at most :data:`MAX_REASON`
    characters); each bad one is added to ``problems`` by name, and its default returned."""
    dry_run = dry_run_param(params, problems)
    reason = params.get("reason") or ""
    if not isinstance(reason, str) or len(reason) > MAX_REASON:
        problems.append(f"Param reason: expected text of at most {MAX_REASON} characters")
        reason = ""
    return dry_run, reason


def as_of_param(given: Any, problems: list[str], *, required: bool = False) -> datetime | None:
    """The Param ``as_of``, an ISO 8601 time (UTC when it names no zone) not in the future, or None when empty
    (a problem too when ``required``); a bad one is added to ``problems`` and None returned."""
    example = "an ISO 8601 time such as 2026-11-24T03:00:00Z"
    if given in (None, ""):
        if required:
            problems.append(f"Param as_of: required with target as_of ({example})")
        return None
    try:
        moment = datetime.fromisoformat(str(given))
    except ValueError:
        problems.append(f"Param as_of: expected {example}, got {given!r}")
        return None
    moment = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    if moment > datetime.now(UTC):
        problems.append(f"Param as_of: {moment.isoformat()} is in the future")
        return None
    return moment
