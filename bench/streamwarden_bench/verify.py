"""Is an engine's output right? Every offset of the workload exactly once, and the same final tables.

Streamwarden's ``session_rows`` and the peer's rows have the same shape (one row per changed table row,
with its Kafka coordinates): both are replayed with :func:`streamwarden.testing.replay.final_tables`. The
baseline keeps one row per message with the raw value, replayed through the reference
:func:`streamwarden.wire.apply_event`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from streamwarden.tables.location import QUARANTINE, SESSION_ROWS
from streamwarden.testing.exactly_once import verify_table
from streamwarden.testing.replay import final_tables, read_table
from streamwarden.wire import DEMO_SCHEMA, Table, TableSchema, apply_event, decode

from .baseline import SCHEMA as BASELINE_SCHEMA
from .workload import Ends

_EXAMPLES = 5


@dataclass
class Verdict:
    """``ok`` when no problem was found; ``problems`` says what is wrong, with a few examples."""

    rows: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def read_files(root: Path, schema: pa.Schema) -> pa.Table:
    """Every visible Parquet file under ``root``, cast to ``schema`` (per-file inferred types may differ)."""
    paths = sorted(p for p in root.rglob("*.parquet")
                   if not any(part.startswith(("_", ".")) for part in p.relative_to(root).parts))
    tables = [pq.read_table(p, columns=schema.names).cast(schema) for p in paths]
    return pa.concat_tables(tables) if tables else schema.empty_table()


def check_offsets(rows: pa.Table, ends: Ends, key: str | None) -> list[str]:
    """Each partition's offsets are exactly ``[0, end)``; no (offset, ``key``) row twice."""
    problems = []
    stats = rows.group_by(["topic", "partition"]).aggregate(
        [("offset", "count_distinct"), ("offset", "min"), ("offset", "max")]).to_pylist()
    found = {(s["topic"], int(s["partition"])): s for s in stats}
    for topic, parts in sorted(ends.items()):
        for partition, end in sorted(parts.items()):
            s = found.pop((topic, partition), None)
            seen = (0, None, None) if s is None else (s["offset_count_distinct"], s["offset_min"], s["offset_max"])
            if end and seen != (end, 0, end - 1):
                problems.append(f"{topic}[{partition}]: expected offsets [0, {end}), found {seen[0]} distinct "
                                f"in [{seen[1]}, {seen[2]}]")
    problems.extend(f"unexpected partition {tp}" for tp in sorted(found))
    columns = ["topic", "partition", "offset", *([key] if key else [])]
    distinct = rows.group_by(columns).aggregate([]).num_rows
    if distinct != rows.num_rows:
        problems.append(f"{rows.num_rows - distinct} duplicate row(s) by {', '.join(columns)}")
    return problems


def compare_tables(got: dict[str, Table], expected: dict[str, Table]) -> list[str]:
    """Differences between rebuilt and expected tables of the open sessions, a few named."""
    if got == expected:
        return []
    wrong = sorted(s for s in got.keys() | expected.keys() if got.get(s) != expected.get(s))
    return [f"{len(wrong)} of {len(expected)} session table(s) differ, e.g. {', '.join(wrong[:_EXAMPLES])}"]


def verify_session_rows(rows: pa.Table, ends: Ends, expected: dict[str, Table],
                        schema: TableSchema = DEMO_SCHEMA) -> Verdict:
    """Rows in the ``session_rows`` shape: offsets exactly once, tables as expected."""
    verdict = Verdict(rows.num_rows, check_offsets(rows, ends, "row_id"))
    verdict.problems.extend(compare_tables(final_tables(rows, schema), expected))
    return verdict


def verify_streamwarden(output_root: Path, ends: Ends, expected: dict[str, Table]) -> Verdict:
    """Streamwarden's Delta tables as a Delta reader sees them: ``session_rows`` right, the quarantine empty.

    Both tables' logs are checked too (:func:`streamwarden.testing.exactly_once.verify_table`): every
    file they list is there, and every row lies inside the offsets the log records as committed.
    ``session_rows`` holds several rows per offset (one per changed table row), so its duplicates are
    judged by :func:`check_offsets` (by offset and ``row_id``), not by ``verify_table``.
    """
    verdict = verify_session_rows(read_table(output_root / SESSION_ROWS, absent=quix_schema()), ends, expected)
    for name in (SESSION_ROWS, QUARANTINE):
        verdict.problems.extend(f"{name}: {problem}" for problem in verify_table(output_root / name).problems)
    dead = read_table(output_root / QUARANTINE, ["offset"]).num_rows
    if dead:
        verdict.problems.append(f"{dead} record(s) in quarantine")
    return verdict


def quix_schema(schema: TableSchema = DEMO_SCHEMA) -> pa.Schema:
    """The peer's rows (``session_rows`` columns; Quix adds ``_key`` and ``_timestamp``)."""
    types = {"string": pa.string(), "long": pa.int64(), "double": pa.float64(), "boolean": pa.bool_(),
             "timestamp": pa.string()}
    return pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                      ("session_id", pa.string()), ("seq", pa.int64()), ("op", pa.string()),
                      ("row_id", pa.string()), *((name, types[type_]) for name, type_ in schema)])


def verify_quix(root: Path, ends: Ends, expected: dict[str, Table]) -> Verdict:
    return verify_session_rows(read_files(root, quix_schema()), ends, expected)


def verify_baseline(root: Path, ends: Ends, expected: dict[str, Table], schema: TableSchema = DEMO_SCHEMA
                    ) -> Verdict:
    """One row per message; the tables are rebuilt from the raw records in offset order."""
    rows = read_files(root, BASELINE_SCHEMA)
    verdict = Verdict(rows.num_rows, check_offsets(rows, ends, None))
    ordered = rows.select(["topic", "partition", "offset", "key", "value"]).sort_by(
        [("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")])
    tables: dict[str, Table] = {}
    for key, value in zip(ordered.column("key").to_pylist(), ordered.column("value").to_pylist(), strict=True):
        event = decode(key, value, schema)
        if event.type == "end":
            tables.pop(event.session_id, None)
        else:
            tables[event.session_id] = apply_event(tables.get(event.session_id, {}), event)
    verdict.problems.extend(compare_tables(tables, expected))
    return verdict
