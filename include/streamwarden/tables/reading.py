"""Reading the output tables through their Delta log: a pyarrow dataset of one version, and a summary.

Only files the log names at that version are read, so a reader never sees part of a batch, a file a
compaction replaced, or the files of a batch that crashed before its commit.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.compute as pc  # type: ignore[import-untyped, unused-ignore]
import pyarrow.dataset as ds  # type: ignore[import-untyped, unused-ignore]
from deltalake import DeltaTable
from pyarrow import fs  # type: ignore[import-untyped, unused-ignore]

from streamwarden.settings import Settings
from streamwarden.tables.commits import commit_info
from streamwarden.tables.committed import Runs
from streamwarden.tables.location import QUARANTINE, RECORDS, SESSION_ROWS, TableLocation


def read(settings: Settings, name: str, version: int | None = None) -> ds.Dataset:
    """Table ``name`` at ``version`` (the newest when None) as a pyarrow dataset."""
    location = TableLocation.of(settings, name)
    return dataset(location.open(version), location)


def dataset(table: DeltaTable, location: TableLocation, dictionary_columns: Sequence[str] = (),
            leave_out: Collection[str] = ()) -> ds.Dataset:
    """The files of ``table``'s version as a pyarrow dataset, with the partition columns.

    Built from the version's add actions, each file known only by its partition values. Not
    ``DeltaTable.to_pyarrow_dataset``: deltalake 1.6.6 gives every column without min/max statistics the
    guarantee ``column >= null``, so a filter on such a column (``error_class = 'SEQUENCE_GAP'``, pushed down
    by DuckDB too) skips every file and finds no row (docs/delta-rs-behaviour.md). The files are read through
    pyarrow's own filesystem for the table's store (local or object store), rooted at the table; delta-rs's
    filesystem object can abort the interpreter at exit. ``dictionary_columns`` are read dictionary-encoded;
    the files named in ``leave_out`` (paths as the log lists them: missing or damaged in storage) are not read.
    """
    store, path = location.filesystem()
    filesystem = fs.SubTreeFileSystem(path, store)
    schema = pa.schema(table.schema().to_arrow())
    partition_columns = list(table.metadata().partition_columns)
    actions = pa.table(table.get_add_actions(flatten=False))
    paths = actions.column("path").to_pylist()
    values = actions.column("partition").to_pylist() if partition_columns else [{}] * len(paths)
    file_format = ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(dictionary_columns=dictionary_columns))
    fragments = [file_format.make_fragment(file, filesystem, partition_expression=_partition(schema, given))
                 for file, given in zip(paths, values, strict=True) if file not in leave_out]
    return ds.FileSystemDataset(fragments, schema, file_format, filesystem)


def _partition(schema: pa.Schema, values: dict[str, str | None]) -> ds.Expression:
    """What a file's partition values say of its rows (``column == value``, or null)."""
    expression = ds.scalar(True)
    for name, value in values.items():
        field = ds.field(name)
        kind = schema.field(name).type
        expression &= field.is_null() if value is None else field == pa.scalar(value).cast(kind)
    return expression


@dataclass(frozen=True)
class PartitionOffsets:
    """What one table holds of one topic-partition."""

    topic: str
    partition: int
    rows: int
    committed: list[tuple[int, int]]  # the offset intervals the log records as committed


class Head(NamedTuple):
    """The newest version of a table and the commit that made it."""

    version: int
    committed_at: str
    operation: str


@dataclass(frozen=True)
class TableSummary:
    """One table at its newest version (``head`` is None before the stream created it)."""

    name: str
    path: str
    head: Head | None = None
    rows: int = 0
    files: int = 0
    bytes: int = 0
    partitions: tuple[PartitionOffsets, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """Flat JSON: ``exists``, ``version``, ``last_commit_at`` and ``last_operation`` beside the counts."""
        document = asdict(self)
        head = document.pop("head")
        return {**document, "exists": head is not None, "version": head and head.version,
                "last_commit_at": head and head.committed_at, "last_operation": head and head.operation}

    def text(self) -> str:
        """A few lines for a person: the table, then one line per topic-partition."""
        if self.head is None:
            return f"{self.name}: no Delta table yet at {self.path} (the stream creates it at start)"
        lines = [f"{self.name}: version {self.head.version}, {self.rows:,} rows in {self.files:,} files "
                 f"({self.bytes / 2**20:,.1f} MiB), last commit {self.head.committed_at} ({self.head.operation})",
                 f"  {self.path}"]
        if self.partitions:
            width = max(len(p.topic) for p in self.partitions)
            lines.append(f"  {'topic':<{width}}  partition  {'rows':>12}  committed offsets")
            lines.extend(f"  {p.topic:<{width}}  {p.partition:>9}  {p.rows:>12,}  "
                         + ", ".join(f"[{s}, {e})" for s, e in p.committed) for p in self.partitions)
        return "\n".join(lines)


def summarize(settings: Settings, name: str) -> TableSummary:
    """Version, rows, files, last commit and committed offsets per topic-partition of table ``name``."""
    location = TableLocation.of(settings, name)
    location.refuse_legacy_layout()
    table = location.open_or_none()
    if table is None:
        return TableSummary(name, location.uri)
    with location.reaching():
        return _summary(location, table)


def _summary(location: TableLocation, table: DeltaTable) -> TableSummary:
    actions = pa.table(table.get_add_actions(flatten=True))
    offsets = dataset(table, location).to_table(columns=["topic", "partition"])
    counts = offsets.group_by(["topic", "partition"]).aggregate([("topic", "count")]) if offsets.num_rows else None
    rows = {(t, p): n for t, p, n in zip(*(counts.column(c).to_pylist() for c in ("topic", "partition", "topic_count")),
                                          strict=True)} if counts is not None else {}
    runs = Runs.read(table, sorted(rows)).index()
    last = commit_info(location, table.version()) or table.history(limit=1)[0]  # the version read, not a newer one
    head = Head(table.version(), datetime.fromtimestamp(last["timestamp"] / 1000, UTC).isoformat(),
                str(last.get("operation")))
    return TableSummary(
        location.name, location.uri, head, rows=sum(rows.values()), files=actions.num_rows,
        bytes=int(pc.sum(actions.column("size_bytes")).as_py() or 0),
        partitions=tuple(PartitionOffsets(t, p, n, runs.get(t, {}).get(p, [])) for (t, p), n in sorted(rows.items())),
    )


def summarize_all(settings: Settings) -> list[TableSummary]:
    """Every table of the configured pipeline."""
    names = (RECORDS,) if settings.pipeline == "records" else (SESSION_ROWS, QUARANTINE)
    return [summarize(settings, name) for name in names]

