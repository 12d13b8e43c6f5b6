"""Writes one table's rows of a micro-batch as Parquet files into its batch folder, on the executors, with pyarrow.

Every file an executor writes for a table goes through the table's pyarrow filesystem
(:meth:`~streamwarden.tables.location.TableLocation.filesystem`), the one the driver lists and commits with:
output on ``s3://``, ``gs://`` or ``az://`` needs no Hadoop connector on the cluster. Two ``mapInArrow``
functions feed a task's rows to a :class:`TableFiles` per table, which writes them the way Spark's Parquet
writer would have, in the layout the sink commits (:mod:`.delta_sink`, step 2); the batch is evaluated once,
in one job, without caching it:

- :class:`PackedFiles`, over the session job's packed output: the operator emits its rows as Arrow IPC
  payloads (:mod:`streamwarden.stream.sessions.packing`), one kind per table. Handing them to Spark's Parquet
  writer would turn every row into a JVM row, sort the rows by folder and encode them again: measured on 2
  cores, about half of the JVM's CPU in a batch.
- :class:`RowFiles`, over the records pipeline's rows (one table).

1. Gather the task's rows of the table into one Arrow table, :data:`WRITE_ROWS` rows at a time
   (steps 2-4 run on each such step; the last when the task's input ends).
2. Leave out the rows of offsets the table already holds (the plan's ``already_committed``; a replay after
   a crash between two tables' commits).
3. Add the folder columns (:data:`FOLDER_COLUMNS`: the topic, the UTC date and hour of the table's time
   column), all as strings, as Spark's ``date_format`` gives them.
4. For each combination of the table's partition columns: one file
   ``<batch folder>/<col>=<value>/.../part-<task>.<codec>.parquet`` holding the other columns, in the rows'
   order (a null value is Hive's default partition, as Spark writes it), a row group per step that reached it.
   The file is written under a hidden name and renamed once the task's input has ended, so the sink never
   lists a partial file; the name depends only on the task's partition, so a retried task replaces its own
   file.
5. Yield ``(kind, path, rows)`` per file, and ``(kind, null, rows)`` with the rows the task was given for
   the kind (the payloads' ``rows``; the records' own count): the driver checks that the files hold them all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from urllib.parse import quote

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.compute as pc  # type: ignore[import-untyped, unused-ignore]
import pyarrow.parquet as pq  # type: ignore[import-untyped, unused-ignore]
from pyspark import TaskContext
from pyspark.sql.types import LongType, StringType, StructField, StructType

from streamwarden.stream.ipc import from_ipc
from streamwarden.stream.sink.delta_sink import HIVE_NULL
from streamwarden.tables.batches import sorted_runs
from streamwarden.tables.location import TableLocation
from streamwarden.tables.ranges import TopicPartitionInterval

WRITTEN_SCHEMA = StructType([StructField("kind", StringType()), StructField("path", StringType()),
                             StructField("rows", LongType())])
"""What :class:`PackedFiles` and :class:`RowFiles` yield: one row per file written, and per kind the rows
declared (null path)."""


def _dates(times: pa.ChunkedArray) -> pa.ChunkedArray:
    """``yyyy-MM-dd`` of each time, in its zone: the few distinct days formatted once, then looked up (a
    tenth of ``strftime``'s time per row)."""
    days = pc.dictionary_encode(times.cast(pa.date32()))
    return pa.chunked_array([chunk.dictionary.cast(pa.string()).take(chunk.indices) for chunk in days.chunks],
                            pa.string())


_HOURS = pa.array([f"{hour:02d}" for hour in range(24)], pa.string())


def _hours(times: pa.ChunkedArray) -> pa.ChunkedArray:
    """``HH`` of each time, in its zone (looked up, as :func:`_dates`)."""
    return _HOURS.take(pc.hour(times))


@dataclass(frozen=True)
class FolderColumn:
    """A column derived for folder partitioning: the topic, or a date/hour of the table's time column (UTC)."""

    name: str
    spark_format: str | None  # ``date_format`` pattern; None: the topic itself
    labels: Callable[[pa.ChunkedArray], pa.ChunkedArray] | None  # the same in Arrow, from the time column


FOLDER_COLUMNS = {
    "topic": FolderColumn("source_topic", None, None),
    "date": FolderColumn("event_date", "yyyy-MM-dd", _dates),
    "hour": FolderColumn("event_hour", "HH", _hours),
}
"""Every table holds all three (distinct from the in-file columns, so every file keeps topic/partition/offset);
``output_partition_by`` chooses which become folders."""


def with_folder_schema(schema: pa.Schema) -> pa.Schema:
    """The table's schema: its rows' columns and the folder columns (strings)."""
    for column in FOLDER_COLUMNS.values():
        schema = schema.append(pa.field(column.name, pa.string()))
    return schema


def excluding(table: pa.Table, intervals: Sequence[TopicPartitionInterval]) -> pa.Table:
    """Step 2: the rows of ``table`` outside every ``(topic, partition, [start, end))`` of ``intervals``."""
    inside = None
    for topic, partition, start, end in intervals:
        match = pc.and_(pc.and_(pc.equal(table["topic"], topic), pc.equal(table["partition"], partition)),
                        pc.and_(pc.greater_equal(table["offset"], start), pc.less(table["offset"], end)))
        inside = match if inside is None else pc.or_(inside, match)
    return table if inside is None else table.filter(pc.invert(inside))


def with_folder_columns(table: pa.Table, time_column: str) -> pa.Table:
    """Step 3: ``table`` with the folder columns appended."""
    for column in FOLDER_COLUMNS.values():
        values = table["topic"] if column.labels is None else column.labels(table[time_column])
        table = table.append_column(pa.field(column.name, pa.string()), values.cast(pa.string()))
    return table


def folder_runs(table: pa.Table, partition_by: Sequence[str]) -> Iterator[tuple[str, pa.Table]]:
    """Step 4's split: ``(relative folder, its rows without the partition columns)`` per combination of values,
    the rows of each in their order in ``table``."""
    if not partition_by:
        yield "", table
        return
    codes = np.zeros(table.num_rows, dtype=np.int64)
    dictionaries = []
    for name in partition_by:
        column = table[name]  # Hive (and Spark) write an empty value as the null folder: one folder for both
        encoded = pc.dictionary_encode(pc.if_else(pc.equal(column, ""), pa.scalar(None, pa.string()),
                                                  column)).combine_chunks()
        size = len(encoded.dictionary) + 1  # + null
        codes = codes * size + pc.fill_null(encoded.indices, size - 1).to_numpy(zero_copy_only=False)
        dictionaries.append((name, encoded.dictionary.to_pylist(), size))
    order, runs = sorted_runs(codes)
    rows = table.drop_columns(list(partition_by)).take(pa.array(order))
    for code, start, count in runs:
        parts, rest = [], code
        for name, values, size in reversed(dictionaries):
            rest, index = divmod(rest, size)
            value = values[index] if index < len(values) else None
            parts.append(f"{name}={HIVE_NULL if value is None else quote(value, safe='')}")
        yield "/".join(reversed(parts)), rows.slice(start, count)


WRITE_ROWS = 65_536
"""A task writes a table's rows in steps of about this many (its payloads gathered until then), each step a row
group of every file it reaches: the task holds one step's rows at a time, however many the batch has."""


@dataclass(frozen=True)
class BatchFiles:
    """Where and how one kind of a batch's rows is written as one table's Parquet files (steps 1-4)."""

    location: TableLocation
    folder: str  # the batch folder, relative to the table
    kind: str
    time_column: str
    partition_by: tuple[str, ...]
    compression: str
    exclude: tuple[TopicPartitionInterval, ...] = ()

    def open(self, task: int) -> TableFiles:
        """The files of ``task``, written as its payloads are added."""
        return TableFiles(self, task)


class TableFiles:
    """The files of one table written by one task: rows in, steps of :data:`WRITE_ROWS` rows out."""

    def __init__(self, files: BatchFiles, task: int) -> None:
        self.files = files
        self.name = f"part-{task:05d}.{files.compression}.parquet"
        self.store, self.table_path = files.location.filesystem()
        self._pending: list[pa.Table] = []  # step 1: payloads not written yet
        self._pending_rows = 0
        self._writers: dict[str, tuple[str, pq.ParquetWriter]] = {}  # folder -> (its hidden file, its writer)
        self._rows: dict[str, int] = {}  # folder -> rows written

    def add(self, table: pa.Table) -> None:
        """Take some of the table's rows; writes a step when enough are pending."""
        self._pending.append(table)
        self._pending_rows += table.num_rows
        if self._pending_rows >= WRITE_ROWS:
            self._write()

    def close(self) -> list[tuple[str, int]]:
        """Write what is pending, finish every file and give it its name: their paths and rows."""
        self._write()
        written = []
        with self.files.location.reaching():
            for folder, (hidden, writer) in self._writers.items():
                writer.close()
                self.store.move(hidden, f"{folder}/{self.name}")
                written.append((f"{folder}/{self.name}", self._rows[folder]))
        return written

    def _write(self) -> None:
        """Steps 2-4 over the pending payloads: each folder's rows appended to its file."""
        if not self._pending:
            return
        files = self.files
        table = with_folder_columns(excluding(pa.concat_tables(self._pending), files.exclude), files.time_column)
        self._pending, self._pending_rows = [], 0
        with files.location.reaching():
            for relative, part in folder_runs(table, files.partition_by):
                folder = "/".join(p for p in (self.table_path, files.folder, relative) if p)
                if folder not in self._writers:
                    self.store.create_dir(folder, recursive=True)
                    hidden = f"{folder}/.{self.name}.inprogress"
                    compression = "NONE" if files.compression == "none" else files.compression
                    self._writers[folder] = hidden, pq.ParquetWriter(hidden, part.schema, filesystem=self.store,
                                                                     compression=compression)
                    self._rows[folder] = 0
                self._writers[folder][1].write_table(part, row_group_size=WRITE_ROWS)
                self._rows[folder] += part.num_rows


@dataclass(frozen=True)
class PackedFiles:
    """``mapInArrow`` over the operator's packed output: every table's files of the task (step 5's rows)."""

    tables: tuple[BatchFiles, ...]  # the tables the batch still writes, each of its own kind

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        index = _task_index()
        wanted = {files.kind: files for files in self.tables}
        opened: dict[str, TableFiles] = {}
        declared = dict.fromkeys(wanted, 0)
        for batch in batches:
            for kind, rows, payload in zip(batch["kind"].to_pylist(), batch["rows"].to_pylist(),
                                           batch["payload"].to_pylist(), strict=True):
                if kind in wanted and payload is not None:
                    if kind not in opened:
                        opened[kind] = wanted[kind].open(index)
                    opened[kind].add(from_ipc(payload))
                    declared[kind] += rows
        yield from _written([(kind, files, declared[kind]) for kind, files in opened.items()])


@dataclass(frozen=True)
class RowFiles:
    """``mapInArrow`` over the rows of one table (the records pipeline): the task's files of it (step 5's rows)."""

    files: BatchFiles

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        opened: TableFiles | None = None
        declared = 0
        for batch in batches:
            if batch.num_rows:
                if opened is None:
                    opened = self.files.open(_task_index())
                opened.add(pa.Table.from_batches([batch]))
                declared += batch.num_rows
        if opened is not None:
            yield from _written([(self.files.kind, opened, declared)])


def _task_index() -> int:
    task = TaskContext.get()
    return 0 if task is None else task.partitionId()


def _written(tables: Sequence[tuple[str, TableFiles, int]]) -> Iterator[pa.RecordBatch]:
    """Step 5: per table, its declared rows (null path), then each file it closed with its rows."""
    out: list[tuple[str, str | None, int]] = []
    for kind, files, declared in tables:
        out.append((kind, None, declared))
        out.extend((kind, path, rows) for path, rows in files.close())
    if out:
        kinds, paths, counts = zip(*out, strict=True)
        yield pa.RecordBatch.from_arrays([pa.array(kinds, pa.string()), pa.array(paths, pa.string()),
                                          pa.array(counts, pa.int64())], names=["kind", "path", "rows"])
