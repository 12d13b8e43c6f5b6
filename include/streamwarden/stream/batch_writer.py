"""``foreachBatch`` body: turns one micro-batch into one exactly-once Delta commit per output table.

The batch's ranges come from the checkpoint's offset log and its query id from the checkpoint's
``metadata``; the sink keys the batch folder by both (:mod:`streamwarden.stream.sink.delta_sink`), so a
replay in the same checkpoint overwrites its own uncommitted attempt and a new checkpoint never overwrites
files an earlier table version references.

Per batch:

1. Plan every table (:meth:`DeltaSink.plan`); a table that holds the whole batch already is skipped (a
   replay after a crash between two tables' commits). None left: the batch is only evaluated (``noop``).
2. Write every pending table's rows into its batch folder, evaluating the batch once (a stateful batch
   must not run twice), in one Spark job whose tasks write the files with pyarrow through the table's
   filesystem (:mod:`streamwarden.stream.sink.batch_files`; no Hadoop connector): :class:`RowWrites` (the
   records pipeline) or :class:`PackedWrites` (the session job: every table's files from the operator's
   packed output). The files must hold every row the batch made, or nothing is committed.
3. Commit each table in turn (:meth:`DeltaSink.commit`). A table the batch wrote no rows to (most
   batches' ``quarantine``) commits the offsets with no files.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pyspark.sql import DataFrame, Row

from streamwarden.failures import IntegrityError
from streamwarden.runfiles.checkpoint import batch_start_offsets, read_offsets
from streamwarden.runfiles.checkpoint import query_id as read_query_id
from streamwarden.stream.sink.batch_files import WRITTEN_SCHEMA, BatchFiles, PackedFiles, RowFiles
from streamwarden.stream.sink.delta_sink import BatchPlan, DeltaSink, batch_folder
from streamwarden.tables.ranges import OffsetRanges, flatten

log = logging.getLogger("streamwarden.stream.sink")


def planned_ranges(checkpoint: Path, batch_id: int) -> OffsetRanges:
    """``[start, end)`` per topic-partition of ``batch_id``, from the checkpoint's offset log."""
    end = read_offsets(checkpoint, batch_id)
    if end is None:
        raise IntegrityError(f"batch {batch_id} runs but the offset log has no entry for it",
                             details={"checkpoint": str(checkpoint)})
    start = batch_start_offsets(checkpoint, batch_id) or {}
    ranges: OffsetRanges = {}
    for topic, parts in end.items():
        for part, last in parts.items():
            first = start.get(topic, {}).get(part, last)
            if last > first:
                ranges.setdefault(topic, {})[int(part)] = (int(first), int(last))
    return ranges


def checkpoint_query_id(checkpoint: Path) -> str:
    """The id of the query running on ``checkpoint``; Spark writes it before the first batch runs."""
    try:
        found = read_query_id(checkpoint)
    except (ValueError, OSError) as exc:
        raise IntegrityError(f"the checkpoint's query id cannot be read: {exc}",
                             details={"checkpoint": str(checkpoint)}) from exc
    if found is None:
        raise IntegrityError("a batch runs but the checkpoint has no query id (metadata)",
                             details={"checkpoint": str(checkpoint)})
    return found


Pending = Sequence[tuple[DeltaSink, BatchPlan]]
"""The tables a batch still writes, each with its plan."""


class BatchWrite(Protocol):
    """Step 2: writes a batch's rows of every pending table into the plan's batch folder."""

    def __call__(self, frame: DataFrame, pending: Pending) -> None: ...


@dataclass(frozen=True)
class ArrowTable:
    """Where a table's rows are in the batch written by an ``mapInArrow`` writer: their kind, and the time column
    of its date and hour folders."""

    kind: str
    time_column: str


def _batch_files(tables: Mapping[str, ArrowTable], compression: str, pending: Pending) -> list[BatchFiles]:
    """Each pending table's files of the batch, in ``pending``'s order; what an earlier attempt left is cleared
    first (the files are named per task, not per attempt)."""
    files = []
    for sink, plan in pending:
        sink.discard_written(plan)
        if plan.already_committed:
            log.warning("batch %d: skipping already committed offsets of %s: %s", plan.batch_id, sink.name,
                        plan.already_committed)
        table = tables[sink.name]
        files.append(BatchFiles(sink.location, batch_folder(plan.key), table.kind, table.time_column,
                                tuple(sink.partition_by), compression, tuple(flatten(plan.already_committed))))
    return files


def _check_written(pending: Pending, files: Sequence[BatchFiles], written: Sequence[Row]) -> None:
    """The files of every table hold every row the batch made for it (unless some were committed already)."""
    for (sink, plan), spec in zip(pending, files, strict=True):
        declared = sum(int(row["rows"]) for row in written if row["kind"] == spec.kind and row["path"] is None)
        stored = sum(int(row["rows"]) for row in written if row["kind"] == spec.kind and row["path"] is not None)
        if stored != declared and not plan.already_committed:
            raise IntegrityError(f"batch {plan.batch_id}: the files written to {sink.name} hold {stored} rows, "
                                 f"the batch made {declared}; nothing was committed",
                                 details={"table": sink.name, "written": stored, "counted": declared})


@dataclass(frozen=True)
class RowWrites:
    """The records pipeline: one job writes the batch's rows as the one table's files (:class:`RowFiles`)."""

    table: ArrowTable
    compression: str

    def __call__(self, frame: DataFrame, pending: Pending) -> None:
        (sink, _), = pending
        files = _batch_files({sink.name: self.table}, self.compression, pending)
        written = frame.mapInArrow(RowFiles(files[0]), WRITTEN_SCHEMA).collect()
        _check_written(pending, files, written)


@dataclass(frozen=True)
class PackedWrites:
    """The session job: one job writes every table's rows from the batch's packed output (:class:`PackedFiles`)."""

    tables: Mapping[str, ArrowTable]  # table name -> where its rows are
    compression: str

    def __call__(self, frame: DataFrame, pending: Pending) -> None:
        files = _batch_files(self.tables, self.compression, pending)
        written = frame.mapInArrow(PackedFiles(tuple(files)), WRITTEN_SCHEMA).collect()
        _check_written(pending, files, written)


class DeltaBatchWriter:
    """Writes each micro-batch to every table: the executors write the files, the driver commits them."""

    def __init__(self, sinks: Sequence[DeltaSink], write: BatchWrite, checkpoint: Path) -> None:
        self.sinks = sinks
        self.write = write
        self.checkpoint = checkpoint
        self._query_id: str | None = None  # read at the first batch: the query writes it when it starts

    @property
    def query_id(self) -> str:
        """The id of the query on the checkpoint (fixed for the checkpoint's life, so read once)."""
        if self._query_id is None:
            self._query_id = checkpoint_query_id(self.checkpoint)
        return self._query_id

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        ranges = planned_ranges(self.checkpoint, batch_id)
        pending = []
        for sink in self.sinks:
            plan = sink.plan(ranges, batch_id, self.query_id)
            if plan.fully_committed:
                log.warning("batch %d: %s already holds %s; skipping the write", batch_id, sink.name, plan.ranges)
            else:
                pending.append((sink, plan))
        if not pending:
            # Still evaluate the batch: a stateful operator must commit its state for every batch id
            # (Spark validates it), also when the output of a replayed or empty batch is already at rest.
            frame.write.format("noop").mode("overwrite").save()
            return
        self.write(frame, pending)
        for sink, plan in pending:
            self._commit(sink, plan)

    @staticmethod
    def _commit(sink: DeltaSink, plan: BatchPlan) -> None:
        result = sink.commit(plan)
        log.info("batch %d committed to %s as version %d: %d rows in %d files (commit %.0f ms)", plan.batch_id,
                 result.table, result.version, result.rows, result.files, result.seconds * 1000)
