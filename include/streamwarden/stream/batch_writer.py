"""``foreachBatch`` body: turns one micro-batch into one exactly-once Delta commit per output table.

The batch's ranges come from the checkpoint's offset log and its query id from the checkpoint's
``metadata``; the sink keys the batch folder by both (:mod:`streamwarden.stream.sink.delta_sink`), so a
replay in the same checkpoint overwrites its own uncommitted attempt and a new checkpoint never overwrites
files an earlier table version references.

Per batch:

1. Plan every table (:meth:`DeltaSink.plan`); a table that holds the whole batch already is skipped (a
   replay after a crash between two tables' commits). None left: the batch is only evaluated (``noop``).
2. When the batch feeds more than one table, or its rows are counted, persist it: a stateful batch must
   be evaluated exactly once.
3. With a counter (the session job's packed output, :func:`~streamwarden.stream.sessions.packing.rows_by_kind`),
   count each table's rows: this evaluates the whole batch.
4. For each table: its rows are written to the batch folder (:class:`SparkWrite`: Spark's Parquet writer;
   :class:`PackedWrite`: the executors write the packed rows with pyarrow and report every file's rows,
   which must add up to the count of step 3), and the driver commits them. A table with no rows in the
   batch (most batches' ``quarantine``) is not written: what an earlier attempt left in its folder is
   removed, and the commit records the offsets with no files.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from streamwarden.failures import IntegrityError
from streamwarden.runfiles.checkpoint import batch_start_offsets, read_offsets
from streamwarden.runfiles.checkpoint import query_id as read_query_id
from streamwarden.stream.sink.batch_files import WRITTEN_SCHEMA, BatchFiles
from streamwarden.stream.sink.delta_sink import BatchPlan, DeltaSink, batch_folder
from streamwarden.stream.sink.ranges import OffsetRanges, flatten

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


@dataclass(frozen=True)
class SparkWrite:
    """Spark writes a table's rows (``select`` of the batch) into the batch folder with its Parquet writer."""

    select: Callable[[DataFrame], DataFrame]
    compression: str

    def __call__(self, frame: DataFrame, plan: BatchPlan, sink: DeltaSink) -> int | None:
        rows = self.select(frame)
        keep = plan.exclusion_predicate()
        if keep is not None:
            rows = rows.filter(keep)
        writer = rows.write.mode("overwrite").option("compression", self.compression)
        if sink.partition_by:
            writer = writer.partitionBy(*sink.partition_by)
        writer.parquet(plan.write_dir)
        return None


@dataclass(frozen=True)
class PackedWrite:
    """The executors write a table's rows from the batch's packed output (rows of ``kind``) with pyarrow."""

    kind: str
    time_column: str  # the folder columns' date and hour
    compression: str

    def __call__(self, frame: DataFrame, plan: BatchPlan, sink: DeltaSink) -> int | None:
        sink.discard_written(plan)  # the files are named per task, not per attempt: clear what one left
        files = BatchFiles(sink.location, batch_folder(plan.key), self.kind, self.time_column,
                           tuple(sink.partition_by), self.compression, tuple(flatten(plan.already_committed)))
        written = frame.filter(F.col("kind") == self.kind).mapInArrow(files, WRITTEN_SCHEMA).collect()
        return sum(int(row["rows"]) for row in written)


@dataclass(frozen=True)
class TableSink:
    """One output table: its Delta sink (which knows the partitioning) and how a batch's rows are written."""

    sink: DeltaSink
    write: Callable[[DataFrame, BatchPlan, DeltaSink], int | None]  # the rows written, when known
    kind: str | None = None  # its rows' key in the batch writer's counts (None: not counted, always written)


class DeltaBatchWriter:
    """Writes each micro-batch to every table: the executors write the files, the driver commits them."""

    def __init__(self, sinks: Sequence[TableSink], checkpoint: Path,
                 count_rows: Callable[[DataFrame], Mapping[str, int]] | None = None) -> None:
        self.sinks = sinks
        self.checkpoint = checkpoint
        self.count_rows = count_rows
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
            plan = sink.sink.plan(ranges, batch_id, self.query_id)
            if plan.fully_committed:
                log.warning("batch %d: %s already holds %s; skipping the write", batch_id, sink.sink.name,
                            plan.ranges)
            else:
                pending.append((sink, plan))
        if not pending:
            # Still evaluate the batch: a stateful operator must commit its state for every batch id
            # (Spark validates it), also when the output of a replayed or empty batch is already at rest.
            frame.write.format("noop").mode("overwrite").save()
            return
        shared = len(pending) > 1 or self.count_rows is not None  # a stateful batch must not run twice
        if shared:
            frame = frame.persist()
        try:
            counts = None if self.count_rows is None else self.count_rows(frame)
            for sink, plan in pending:
                counted = None if counts is None or sink.kind is None else counts.get(sink.kind, 0)
                if counted == 0:
                    sink.sink.discard_written(plan)
                else:
                    self._write(sink, plan, frame, counted)
                self._commit(sink, plan)
        finally:
            if shared:
                frame.unpersist()

    @staticmethod
    def _write(sink: TableSink, plan: BatchPlan, frame: DataFrame, counted: int | None) -> None:
        if plan.already_committed:
            log.warning("batch %d: skipping already committed offsets of %s: %s", plan.batch_id, sink.sink.name,
                        plan.already_committed)
        written = sink.write(frame, plan, sink.sink)
        if written is not None and counted is not None and not plan.already_committed and written != counted:
            raise IntegrityError(f"batch {plan.batch_id}: the files written to {sink.sink.name} hold {written} rows, "
                                 f"the batch made {counted}; nothing was committed",
                                 details={"table": sink.sink.name, "written": written, "counted": counted})

    @staticmethod
    def _commit(sink: TableSink, plan: BatchPlan) -> None:
        result = sink.sink.commit(plan)
        log.info("batch %d committed to %s as version %d: %d rows in %d files (commit %.0f ms)", plan.batch_id,
                 result.table, result.version, result.rows, result.files, result.seconds * 1000)
