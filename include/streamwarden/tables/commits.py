"""A table's commits read from its Delta log by version number, exactly.

delta-rs's ``DeltaTable.history()`` reads the newest commits from the store but numbers them down from the
version its snapshot was loaded at: when a writer (the stream) commits between the load and the call, every
entry carries the version of the commit before it (seen with deltalake 1.6: a snapshot at 3, one commit more,
``history(2)`` gave the commit of version 4 as ``version`` 3). Whatever must know *which* version a commit is
(maintenance proving and reverting its own commit) reads ``_delta_log/<version>.json`` itself: a commit file
never changes once written.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from streamwarden.tables.location import TableLocation


def commit_info(location: TableLocation, version: int) -> dict[str, Any] | None:
    """The ``commitInfo`` of ``version`` (its custom metadata among its keys); None when the version's log file
    is not there (not committed yet, or cleaned up) or it has no ``commitInfo``."""
    store, base = location.filesystem()
    with location.reaching():
        try:
            with store.open_input_stream(f"{base}/_delta_log/{version:020d}.json") as stream:
                text = stream.read().decode()
        except FileNotFoundError:
            return None
    for line in text.splitlines():
        action = json.loads(line) if line.strip() else {}
        if "commitInfo" in action:
            info: dict[str, Any] = action["commitInfo"]
            return info
    return None


def commits_after(location: TableLocation, version: int, until: int | None = None
                  ) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(version, commitInfo)`` of every commit after ``version``, oldest first, up to ``until`` (default: the
    newest there is); a version whose log entry is gone (cleaned up) is left out."""
    newest = location.open().version() if until is None else until
    for number in range(version + 1, newest + 1):
        info = commit_info(location, number)
        if info is not None:
            yield number, info
