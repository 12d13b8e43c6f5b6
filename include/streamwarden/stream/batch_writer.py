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
4. For each table: Spark writes its rows to the batch folder, and the driver commits them. A table with
   no rows in the batch (most batches' ``quarantine``) is not written: what an earlier attempt left in its
   folder is removed, and the commit records the offsets with no files.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame

from streamwarden.failures import IntegrityError
from streamwarden.runfiles.checkpoint import batch_start_offsets, read_offsets
from streamwarden.runfiles.checkpoint import query_id as read_query_id
from streamwarden.stream.sink.delta_sink import BatchPlan, DeltaSink
from streamwarden.stream.sink.ranges import OffsetRanges

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
class TableSink:
    """One output table: which rows of the batch go there, and its Delta sink (which knows the partitioning)."""

    sink: DeltaSink
    select: Callable[[DataFrame], DataFrame]
    kind: str | None = None  # its rows' key in the batch writer's counts (None: not counted, always written)


class DeltaBatchWriter:
    """Writes each micro-batch to every table: Spark writes the files, the driver commits them."""

    def __init__(self, sinks: Sequence[TableSink], checkpoint: Path, compression: str,
                 count_rows: Callable[[DataFrame], Mapping[str, int]] | None = None) -> None:
        self.sinks = sinks
        self.checkpoint = checkpoint
        self.compression = compression
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
                if counts is not None and sink.kind is not None and not counts.get(sink.kind):
                    sink.sink.discard_written(plan)
                    self._commit(sink, plan)
                else:
                    self._write(sink, plan, frame, batch_id)
        finally:
            if shared:
                frame.unpersist()

    def _write(self, sink: TableSink, plan: BatchPlan, frame: DataFrame, batch_id: int) -> None:
        rows = sink.select(frame)
        keep = plan.exclusion_predicate()
        if keep is not None:
            log.warning("batch %d: skipping already committed offsets of %s: %s", batch_id, sink.sink.name,
                        plan.already_committed)
            rows = rows.filter(keep)
        writer = rows.write.mode("overwrite").option("compression", self.compression)
        if sink.sink.partition_by:
            writer = writer.partitionBy(*sink.sink.partition_by)
        writer.parquet(plan.write_dir)
        self._commit(sink, plan)

    @staticmethod
    def _commit(sink: TableSink, plan: BatchPlan) -> None:
        result = sink.sink.commit(plan)
        log.info("batch %d committed to %s as version %d: %d rows in %d files (commit %.0f ms)", plan.batch_id,
                 result.table, result.version, result.rows, result.files, result.seconds * 1000)
