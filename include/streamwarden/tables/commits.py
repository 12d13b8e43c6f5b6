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
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from streamwarden.tables.location import TableLocation


@dataclass(frozen=True)
class CommitEntry:
    """One version's log entry: its ``commitInfo`` (empty when it has none) and the files it added and
    removed."""

    info: dict[str, Any]
    added: tuple[str, ...]
    removed: tuple[str, ...]


def commit_entry(location: TableLocation, version: int) -> CommitEntry | None:
    """The log entry of ``version``; None when its log file is not there (not committed yet, or cleaned up)."""
    store, base = location.filesystem()
    with location.reaching():
        try:
            with store.open_input_stream(f"{base}/_delta_log/{version:020d}.json") as stream:
                text = stream.read().decode()
        except FileNotFoundError:
            return None
    info: dict[str, Any] = {}
    files: dict[str, list[str]] = {"add": [], "remove": []}
    for line in text.splitlines():
        action = json.loads(line) if line.strip() else {}
        if "commitInfo" in action:
            info = action["commitInfo"]
        for kind, paths in files.items():
            if kind in action:
                paths.append(unquote(action[kind]["path"]))
    return CommitEntry(info, tuple(files["add"]), tuple(files["remove"]))


def commit_info(location: TableLocation, version: int) -> dict[str, Any] | None:
    """The ``commitInfo`` of ``version`` (its custom metadata among its keys); None when the version's log file
    is not there (not committed yet, or cleaned up) or it has no ``commitInfo``."""
    entry = commit_entry(location, version)
    return None if entry is None or not entry.info else entry.info


def commits_after(location: TableLocation, version: int, until: int | None = None
                  ) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(version, commitInfo)`` of every commit after ``version``, oldest first, up to ``until`` (default: the
    newest there is); a version whose log entry is gone (cleaned up) is left out."""
    newest = location.open().version() if until is None else until
    for number in range(version + 1, newest + 1):
        info = commit_info(location, number)
        if info is not None:
            yield number, info
