"""Whether the data files a table version lists are in storage at the size its log recorded.

A file the Delta log lists can be gone or cut short under it: an operator's ``rm``, a bucket lifecycle rule, a
disk that filled during a copy. A reader then fails on it (a BUG-looking "No such file" from deep inside
pyarrow or DuckDB) instead of saying which file and what it held. :func:`check_files` lists the table's
folder once (one recursive listing, cheap on an object store too) and compares each listed file's size with
the add action's; each problem carries what the log's statistics say the file held (rows, topic, Kafka
partitions and offsets), so the offsets at stake are named even though the file cannot be read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
from deltalake import DeltaTable
from pyarrow import fs  # type: ignore[import-untyped, unused-ignore]

from streamwarden.tables.location import TableLocation


class FileFault(StrEnum):
    """What is wrong with a listed data file in storage."""

    MISSING = "missing"
    TRUNCATED = "truncated"  # shorter than its add action says
    GROWN = "grown"  # longer than its add action says (overwritten or appended to)


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

    def line(self) -> str:
        found = "" if self.found_bytes is None else f", {self.found_bytes:,} found"
        written = "" if self.written_at is None else f", written at {self.written_at}"
        return (f"data file {self.path} of {self.table} (listed at version {self.version}{written}) is "
                f"{self.fault.value} in storage ({self.expected_bytes:,} bytes in the log{found}); it held "
                f"{self.held.describe()}")


def check_files(table: DeltaTable, location: TableLocation) -> list[FileProblem]:
    """Every data file ``table``'s version lists that storage lacks or holds at another size."""
    actions = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    if not actions:
        return []
    store, base = location.filesystem()
    with location.reaching():
        listed = store.get_file_info(fs.FileSelector(base, recursive=True, allow_not_found=True))
    prefix = base.rstrip("/") + "/"
    sizes = {info.path.removeprefix(prefix): info.size for info in listed if info.type == fs.FileType.File}
    problems = []
    for action in actions:
        path, expected = str(action["path"]), int(action["size_bytes"])
        found = sizes.get(path)
        if found == expected:
            continue
        fault = FileFault.MISSING if found is None else FileFault.TRUNCATED if found < expected else FileFault.GROWN
        written = action.get("modification_time")
        problems.append(FileProblem(
            location.name, table.version(), path, fault, expected, found,
            None if written is None else datetime.fromtimestamp(int(written) / 1000, UTC).isoformat(timespec="seconds"),
            held_offsets(action)))
    return problems


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
