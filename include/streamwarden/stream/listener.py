"""Heartbeat from a ``StreamingQueryListener``: written on start, every progress, idle and termination.

Spark emits no progress event while idle; ``onQueryIdle`` fires instead (every
``spark.sql.streaming.noDataProgressEventInterval``), so the heartbeat keeps beating when no data flows.

Rows are Kafka records: Spark counts the rows its source emitted, and the session job's source emits one
row per session bucket and read task (its records packed), so the heartbeat counts the offsets the batch
planned (its ranges in the checkpoint's offset log, as the sink commits them) and scales Spark's rates by
the same factor.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyspark.sql.streaming.listener import StreamingQueryListener

from streamwarden.failures import IntegrityError
from streamwarden.runfiles.heartbeat import Heartbeat, write_heartbeat
from streamwarden.stream.batch_durations import BatchDurations
from streamwarden.stream.batch_writer import planned_ranges

log = logging.getLogger("streamwarden.runfiles.heartbeat")


def _offsets(text: str | None) -> dict[str, dict[str, int]]:
    if not text:
        return {}
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def batch_records(checkpoint: Path, batch_id: int) -> int | None:
    """The offsets batch ``batch_id`` planned (``None`` when the offset log cannot tell)."""
    try:
        ranges = planned_ranges(checkpoint, batch_id)
    except (IntegrityError, OSError, ValueError):
        return None
    return sum(end - start for parts in ranges.values() for start, end in parts.values())


class HeartbeatListener(StreamingQueryListener):
    """Writes ``heartbeat.json`` atomically for the warden; never raises into Spark."""

    def __init__(self, path: Path, trigger_interval_s: float, checkpoint: Path | None = None) -> None:
        self.path = path
        self.checkpoint = checkpoint
        self.trigger_interval_s = trigger_interval_s
        self.last: Heartbeat | None = None
        self.durations = BatchDurations()

    def _write(self, heartbeat: Heartbeat) -> None:
        self.last = heartbeat
        try:
            write_heartbeat(self.path, heartbeat)
        except OSError:
            log.exception("cannot write heartbeat %s", self.path)

    def _carry(self, event: str, query_id: Any, run_id: Any) -> Heartbeat:
        base = self.last or Heartbeat(event=event, query_id=str(query_id), run_id=str(run_id), pid=os.getpid(),
                                      trigger_interval_s=self.trigger_interval_s)
        return replace(base, event=event, query_id=str(query_id), run_id=str(run_id),
                       written_at=datetime.now(UTC).isoformat(), num_input_rows=0)

    def onQueryStarted(self, event: Any) -> None:
        self._write(self._carry("started", event.id, event.runId))

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        source = progress.sources[0] if progress.sources else None
        durations = {k: int(v) for k, v in (progress.durationMs or {}).items()}
        now = time.time()
        self.durations.add(at=now, ms=int(progress.batchDuration))
        rows = int(progress.numInputRows)
        records = None if self.checkpoint is None else batch_records(self.checkpoint, int(progress.batchId))
        scale = records / rows if records is not None and rows else 1.0
        self._write(Heartbeat(
            event="progress",
            query_id=str(progress.id),
            run_id=str(progress.runId),
            pid=os.getpid(),
            batch_id=int(progress.batchId),
            progress_timestamp=str(progress.timestamp),
            num_input_rows=rows if records is None or not rows else records,
            input_rows_per_second=float(progress.inputRowsPerSecond or 0.0) * scale,
            processed_rows_per_second=float(progress.processedRowsPerSecond or 0.0) * scale,
            batch_duration_ms=int(progress.batchDuration),
            trigger_interval_s=self.trigger_interval_s,
            end_offsets=_offsets(source.endOffset if source else None),
            latest_offsets=_offsets(source.latestOffset if source else None),
            state=[json.loads(op.json) for op in progress.stateOperators],
            durations_ms=durations,
            batch_p99_ms=self.durations.p99_ms(now),
            process_batches=(self.last.process_batches if self.last else 0) + 1,
        ))

    def onQueryIdle(self, event: Any) -> None:
        self._write(self._carry("idle", event.id, event.runId))

    def onQueryTerminated(self, event: Any) -> None:
        self._write(self._carry("terminated", event.id, event.runId))
