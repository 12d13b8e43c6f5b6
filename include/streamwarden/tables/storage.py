"""Whether the data files a table version lists are in storage at the size its log recorded, with their bytes.

A file the Delta log lists can be gone or cut short under it: an operator's ``rm``, a bucket lifecycle rule, a
disk that filled during a copy. A reader then fails on it (a BUG-looking "No such file" from deep inside
pyarrow or DuckDB) instead of saying which file and what it held. :func:`check_files` lists the table's
folder once (one recursive listing, cheap on an object store too) and compares each listed file's size with
the add action's; each problem carries what the log's statistics say the file held (rows, topic, Kafka
partitions and offsets), so the offsets at stake are named even though the file cannot be read. The files at
their size can then be hashed against the digests recorded at their commits (:mod:`streamwarden.tables.content`):
all of them, or those a chooser picks (validation's bounded share per run).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
from deltalake import DeltaTable

from streamwarden.tables.content import ContentCheck, check_content, data_files, recorded_hashes
from streamwarden.tables.location import TableLocation


class FileFault(StrEnum):
    """What is wrong with a listed data file in storage."""

    MISSING = "missing"
    TRUNCATED = "truncated"  # shorter than its add action says
    GROWN = "grown"  # longer than its add action says (overwritten or appended to)
    CHANGED = "changed"  # at its size, but its bytes hash to another digest than the one recorded at its commit
    UNREADABLE = "unreadable"  # listed at its size, but reading it fails while the store answers


@dataclass(frozen=True)
class HeldOffsets:
    """What a data file held of the Kafka log, from its add action's statistics (min and max per column)."""

    rows: int | None
    topic: str | None  # None when the file held several topics (or the log has no statistics)
    partitions: tuple[int, int] | None  # (lowest, highest) Kafka partition
    offsets: tuple[int, int] | None  # [lowest, highest + 1); exact when ``partitions`` is one partition

    def describe(self) -> str:
        if self.topic is None and self.offsets is None:
            return "the log has no statistics of its rows"
        parts = [f"{self.rows:,} rows" if self.rows is not None else "rows"]
        if self.topic is not None:
            parts.append(f"of {self.topic}")
        if self.partitions is not None:
            low, high = self.partitions
            parts.append(f"partition {low}" if low == high else f"partitions {low}-{high}")
        if self.offsets is not None:
            parts.append(f"offsets [{self.offsets[0]}, {self.offsets[1]})")
        return " ".join(parts)


@dataclass(frozen=True)
class FileProblem:
    """One listed data file that storage does not hold as the log recorded it."""

    table: str
    version: int
    path: str  # relative to the table's folder, as the log lists it
    fault: FileFault
    expected_bytes: int
    found_bytes: int | None  # None when missing
    written_at: str | None  # when the file was written (its add action's modification time, UTC ISO-8601)
    held: HeldOffsets
    digests: tuple[str, str] | None = None  # CHANGED: the recorded digest and the one found
    reason: str | None = None  # UNREADABLE: what reading it said

    def line(self) -> str:
        written = "" if self.written_at is None else f", written at {self.written_at}"
        if self.digests is not None:
            what = f"{self.digests[0]} recorded at its commit, {self.digests[1]} found"
        elif self.reason is not None:
            what = f"listed at its {self.expected_bytes:,} bytes; reading it failed: {self.reason}"
        else:
            found = "" if self.found_bytes is None else f", {self.found_bytes:,} found"
            what = f"{self.expected_bytes:,} bytes in the log{found}"
        return (f"data file {self.path} of {self.table} (listed at version {self.version}{written}) is "
                f"{self.fault.value} in storage ({what}); it held {self.held.describe()}")


Chooser = Callable[[Mapping[str, int]], Iterable[str]]
"""Which of the files found whole (path -> size) to hash: all of them, or a bounded share."""


@dataclass(frozen=True)
class StorageCheck:
    """What storage holds of a table version's files: the problems, and what the content check covered."""

    problems: tuple[FileProblem, ...]
    content: ContentCheck | None  # None: no file's content was checked
    whole_files: int = 0  # files found at their size: those whose content could be checked
    whole_bytes: int = 0


def check_files(table: DeltaTable, location: TableLocation, choose: Chooser | None = None) -> StorageCheck:
    """Every data file ``table``'s version lists that storage lacks or holds at another size, and of those at
    their size, the ones ``choose`` picks whose bytes no longer hash to what their commit recorded."""
    actions = {str(a["path"]): a for a in pa.table(table.get_add_actions(flatten=True)).to_pylist()}
    if not actions:
        return StorageCheck((), None)
    store, base = location.filesystem()
    with location.reaching():
        sizes = data_files(store, base)
    problems, whole = [], {}
    for path, action in actions.items():
        expected, found = int(action["size_bytes"]), sizes.get(path)
        if found == expected:
            whole[path] = expected
            continue
        fault = FileFault.MISSING if found is None else FileFault.TRUNCATED if found < expected else FileFault.GROWN
        problems.append(_problem(location, table, action, fault, found))
    content = None
    if choose is not None:
        chosen = {path: whole[path] for path in choose(whole)}
        content = check_content(location, chosen, recorded_hashes(location, table.version()))
        problems += [replace(_problem(location, table, actions[changed.path], FileFault.CHANGED, whole[changed.path]),
                             digests=(changed.expected, changed.found)) for changed in content.problems]
        problems += [replace(_problem(location, table, actions[lost.path], FileFault.UNREADABLE, whole[lost.path]),
                             reason=lost.reason) for lost in content.unreadable]
    return StorageCheck(tuple(problems), content, len(whole), sum(whole.values()))


def _problem(location: TableLocation, table: DeltaTable, action: Mapping[str, Any], fault: FileFault,
             found: int | None) -> FileProblem:
    written = action.get("modification_time")
    return FileProblem(
        location.name, table.version(), str(action["path"]), fault, int(action["size_bytes"]), found,
        None if written is None else datetime.fromtimestamp(int(written) / 1000, UTC).isoformat(timespec="seconds"),
        held_offsets(action))


def held_offsets(action: Mapping[str, Any]) -> HeldOffsets:
    """What an add action's statistics (flattened: ``min.offset``, ``max.partition``...) say its file held."""
    rows = action.get("num_records")
    low_topic, high_topic = action.get("min.topic"), action.get("max.topic")
    topic = low_topic if low_topic is not None and low_topic == high_topic else None
    low_part, high_part = action.get("min.partition"), action.get("max.partition")
    low_offset, high_offset = action.get("min.offset"), action.get("max.offset")
    return HeldOffsets(
        None if rows is None else int(rows), topic,
        None if low_part is None or high_part is None else (int(low_part), int(high_part)),
        None if low_offset is None or high_offset is None else (int(low_offset), int(high_offset) + 1))
