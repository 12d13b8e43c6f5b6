"""Checks of the Params every manual DAG that changes the stream shares: ``dry_run`` and ``reason``.

Example::

    >>> problems: list[str] = []
    >>> dry_and_reason({"dry_run": "no"}, problems)
    (True, '')
    >>> problems
    ["Param dry_run: expected true or false, got 'no'"]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MAX_REASON = 500


def dry_and_reason(params: Mapping[str, Any], problems: list[str]) -> tuple[bool, str]:
    """``dry_run`` (default true: plan or check only) and ``reason`` (text of at most :data:`MAX_REASON`
    characters); each bad one is added to ``problems`` by name, and its default returned."""
    dry_run = params.get("dry_run", True)
    if not isinstance(dry_run, bool):
        problems.append(f"Param dry_run: expected true or false, got {dry_run!r}")
        dry_run = True
    reason = params.get("reason") or ""
    if not isinstance(reason, str) or len(reason) > MAX_REASON:
        problems.append(f"Param reason: expected text of at most {MAX_REASON} characters")
        reason = ""
    return dry_run, reason
