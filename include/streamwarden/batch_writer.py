"""``foreachBatch`` body: turns one micro-batch into one exactly-once commit of Parquet files."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame

from streamwarden.checkpoint import batch_start_offsets, read_offsets
from streamwarden.failures import IntegrityError
from streamwarden.sink.commit_protocol import CommitProtocol
from streamwarden.sink.ranges import OffsetRanges

log = logging.getLogger("streamwarden.sink")


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


class ParquetBatchWriter:
    """Writes each micro-batch through the :class:`CommitProtocol` of one table."""

    def __init__(self, protocol: CommitProtocol, checkpoint: Path, partition_columns: list[str],
                 compression: str) -> None:
        self.protocol = protocol
        self.checkpoint = checkpoint
        self.partition_columns = partition_columns
        self.compression = compression

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        ranges = planned_ranges(self.checkpoint, batch_id)
        plan = self.protocol.plan(ranges, batch_id)
        if plan.fully_committed:
            log.warning("batch %d: ranges %s already committed; skipping the write", batch_id, plan.ranges)
            return
        keep = plan.exclusion_predicate()
        if keep is not None:
            log.warning("batch %d: skipping already committed offsets %s", batch_id, plan.already_committed)
            frame = frame.filter(keep)
        writer = frame.write.mode("overwrite").option("compression", self.compression)
        if self.partition_columns:
            writer = writer.partitionBy(*self.partition_columns)
        writer.parquet(str(plan.staging_dir))
        extra: dict[str, Any] = {"batch_id": batch_id}
        manifest = self.protocol.commit(plan, extra)
        log.info("batch %d committed: %s", batch_id, manifest)
