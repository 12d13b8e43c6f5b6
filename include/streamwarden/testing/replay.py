"""Read back what the stream committed: its progress, and every session's final table, to check against truth.

Used by tests and benchmarks: the producer knows the tables it meant to send; this reads what the job
committed (through each Delta table's log, as any Delta reader sees it) and replays it the way a
downstream consumer would.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa

from streamwarden.runfiles.checkpoint import committed_offsets
from streamwarden.tables.location import TableLocation
from streamwarden.tables.reading import dataset
from streamwarden.wire import Table, TableSchema

OFFSETS_SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64())])
"""The columns every output table has: what an absent table reads as unless told otherwise."""
OFFSET_COLUMNS = tuple(OFFSETS_SCHEMA.names)

Tables = dict[str, Table]


def caught_up(checkpoint: Path, ends: Mapping[str, Mapping[int, int]]) -> bool:
    """The query has committed every partition of ``ends`` up to its end offset."""
    done = committed_offsets(checkpoint) or {}
    return all(done.get(topic, {}).get(str(partition), -1) >= end
               for topic, parts in ends.items() for partition, end in parts.items())


def read_table(root: Path, columns: list[str] | None = None, absent: pa.Schema = OFFSETS_SCHEMA) -> pa.Table:
    """The rows of the newest version of the Delta table at ``root`` (``columns`` only, when given).

    Only the files its log lists are read. A folder without a Delta log (the table was never created)
    reads as an empty table of ``absent``'s columns.
    """
    location = TableLocation(root.name, root, {})
    if not location.exists():
        return absent.empty_table() if columns is None else absent.empty_table().select(columns)
    return dataset(location.open(), location).to_table(columns=columns)


def final_tables(rows: pa.Table, schema: TableSchema) -> Tables:
    """The table of every open session after its last row (ended sessions are left out)."""
    ordered = rows.select(["session_id", "topic", "partition", "offset", "op", "row_id", *schema.names]).sort_by(
        [("session_id", "ascending"), ("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")])
    tables: Tables = {}
    last_snapshot: dict[str, tuple[str, int, int]] = {}
    for row in ordered.to_pylist():
        session, op, row_id = row["session_id"], row["op"], row["row_id"]
        table = tables.setdefault(session, {})
        values = {c: row[c] for c in schema.names if row[c] is not None}
        position = (row["topic"], row["partition"], row["offset"])
        if op == "snapshot":
            if last_snapshot.get(session) != position:
                table.clear()
                last_snapshot[session] = position
            if row_id is not None:
                table[row_id] = values
        elif op == "upsert":
            table[row_id] = values
        elif op == "delete":
            table.pop(row_id, None)
        elif op == "end":
            tables.pop(session)
    return tables


def offsets_by_table(root: Path, tables: list[str]) -> dict[str, set[tuple[str, int, int]]]:
    """Distinct (topic, partition, offset) of each Delta table under ``root`` (for offset accounting)."""
    found: dict[str, set[tuple[str, int, int]]] = {}
    for name in tables:
        data = read_table(root / name, list(OFFSET_COLUMNS))
        found[name] = set(zip(*(data.column(c).to_pylist() for c in OFFSET_COLUMNS), strict=True))
    return found
