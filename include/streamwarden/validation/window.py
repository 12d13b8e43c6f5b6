"""What a scheduled run's check 1 reads: the offsets above those the last validation checked, and every row
written since it.

A whole-table check 1 holds every offset of the tables in DuckDB, so its memory and time grow with the table
(a 2-hour run of ``make run``: a validation task's peak grew 142 MiB an hour). A run that follows a passing one
reads a *window* instead:

- per topic, the **floor**: the lowest end, over the topic's partitions, of the offsets the last validation
  found covered by both tables (its report's ``claimed``). Every offset at or above it is checked as a
  whole-table run checks it (gaps, duplicates, rows outside the claims): a file holding such an offset has a
  maximum ``offset`` statistic at or above the floor, so every copy of it is read; the other files are not
  opened;
- every **file written since** (the adds of the ``WRITE`` commits after the last validated versions) is read
  whole: a row of it below the floor is an offset validated before and committed again, a DUPLICATE.

What the window does not read again is what the last validation proved and no commit since could change:
the stream's commits only add files, and a compaction (``OPTIMIZE``) only rewrites rows ``maintain_tables``
proves it kept. Any other commit since (a write that removed files, a restore, a delete, a column added, a
commit of an unknown kind),
a version older than the last validated one, a log entry no longer there, tables last validated by
different runs or no passing run at all: check 1 reads every row, and the report says why. ``rows=all`` and
pinned runs always read every row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]

from streamwarden.atomic import read_json
from streamwarden.tables.commits import commit_entry
from streamwarden.validation.snapshot import PinnedTable

READ_AGAIN = frozenset({"OPTIMIZE", "VACUUM START", "VACUUM END"})
"""Commits that add no row check 1 has not seen: compactions (their rows proven kept) and vacuums."""
WRITE = "WRITE"


@dataclass(frozen=True)
class Window:
    """The offsets check 1 reads of each topic (from its floor up), and the files read whole."""

    floors: Mapping[str, int]  # per topic; a topic absent: from offset 0
    since: Mapping[str, int]  # per table: the last validated version, the window's base
    written: Mapping[str, frozenset[str]]  # per table: the files written since, read whole
    run_id: str  # the run that validated them
    partitions: frozenset[tuple[str, int]] = frozenset()  # the topic-partitions that run reported

    def floor(self, topic: str) -> int:
        return self.floors.get(topic, 0)

    def leave_out(self, table: PinnedTable) -> frozenset[str]:
        """The files of ``table`` that hold no offset of the window and were not written since: not read."""
        actions = pa.table(table.table.get_add_actions(flatten=True))
        columns = actions.column_names
        if not {"min.topic", "max.topic", "max.offset"} <= set(columns):
            return frozenset()
        written = self.written.get(table.name, frozenset())
        left = set()
        for path, low, high, last in zip(*(actions.column(c).to_pylist()
                                           for c in ("path", "min.topic", "max.topic", "max.offset")), strict=True):
            if path in written or last is None or low is None or low != high:
                continue  # written since, or without statistics, or of several topics: read
            if last < self.floor(low):
                left.add(path)
        return frozenset(left)

    def floors_frame(self) -> pa.Table:
        return pa.table({"topic": pa.array(list(self.floors), pa.string()),
                         "floor": pa.array(list(self.floors.values()), pa.int64())})

    def line(self) -> str:
        """What check 1 read, for the report."""
        floors = ", ".join(f"{topic} from {floor:,}" for topic, floor in sorted(self.floors.items()))
        since = ", ".join(f"{name} v{version}" for name, version in sorted(self.since.items()))
        written = sum(len(files) for files in self.written.values())
        return (f"the offsets above those the last validation checked ({floors or 'no topic'}; {since}, run "
                f"{self.run_id}) and the {written:,} file(s) written since (`rows=all`: every row)")


def choose_window(tables: Sequence[PinnedTable], last: Mapping[str, Any] | None, folder: Path) -> Window | str:
    """The window after the last passing validation (``last``: its record in ``folder``, the validation folder,
    with the reports), or ``every row: <why>``."""
    if last is None:
        return "every row: no validation has passed yet"
    entries: dict[str, Any] = last.get("tables", {})
    runs = {entries.get(t.name, {}).get("run_id") for t in tables}
    if len(runs) != 1 or None in runs:
        return "every row: the tables were last validated by different runs"
    report = read_json(folder / str(entries[tables[0].name].get("report")))
    if not isinstance(report, dict) or not isinstance(report.get("partitions"), list):
        return "every row: the last passing validation's report is gone"
    since, written = {}, {}
    for table in tables:
        base = entries[table.name].get("version")
        found = _written_since(table, base) if isinstance(base, int) else f"{table.name}: no validated version"
        if isinstance(found, str):
            return f"every row: {found}"
        since[table.name], written[table.name] = base, found
    floors: dict[str, int] = {}
    partitions = set()
    for partition in report["partitions"]:
        claimed = partition.get("claimed") or []
        end = int(claimed[-1][1]) if claimed else 0
        topic = str(partition["topic"])
        floors[topic] = min(floors.get(topic, end), end)
        partitions.add((topic, int(partition["partition"])))
    return Window(floors, since, written, str(runs.pop()), frozenset(partitions))


def _written_since(table: PinnedTable, base: int) -> frozenset[str] | str:
    """The files the ``WRITE`` commits after ``base`` added, or why the window cannot start at ``base``."""
    if base > table.version:
        return f"{table.name} is at version {table.version}, older than its last validated {base} (restored?)"
    written: set[str] = set()
    for version in range(base + 1, table.version + 1):
        entry = commit_entry(table.location, version)
        if entry is None:
            return f"{table.name}'s log entry of version {version} is gone"
        operation = entry.info.get("operation")
        if operation == WRITE and entry.removed:
            return f"{table.name} version {version} removed files"
        if operation == WRITE:
            written.update(entry.added)
        elif operation not in READ_AGAIN:
            return f"{table.name} version {version} is a {operation or 'commit of unknown kind'}"
    return frozenset(written)
