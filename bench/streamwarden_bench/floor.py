"""Spark's own floor under the fixed cost per batch: a minimal stateful micro-batch with the job's settings.

The query, in a process of its own (``python -m streamwarden_bench.floor <folder> <seconds>``: ``seconds`` of
batches after the :data:`SKIPPED` warm-up ones; one JSON object on its last line of output)::

    Python streaming source, ROWS rows a batch over KEYS grouping keys (no Kafka)
      -> groupBy(key).transformWithStateInPandas (one MapState entry read and written per key, TTL, processing
         time, as the job's operator)
      -> foreachBatch that collects the batch (no files, no Delta commit)

It runs on the Spark configuration the job itself gets (:func:`~streamwarden.stream.spark_session.spark_conf`:
RocksDB state with changelog checkpointing, the checkpoint file manager, the shuffle partitions) and the job's
process environment (heap, malloc). What its batches take is Spark's part of a trickle batch (planning, the
offset and commit logs, two stages and their Python workers, the state server and the state commit), which no
change in Streamwarden's code can remove; what the job's trickle batch takes beyond it is ours: Kafka offsets
and reads, the sessions, the files and the Delta commits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from streamwarden.process_setup import launch_env
from streamwarden.settings import load_settings

from .measure import percentiles

KEYS = 16
"""Grouping keys a batch touches: the job's session buckets on its default 2 state partitions."""
ROWS = 200
"""Rows a batch: the fixed-cost trickle's ~200 records."""
TRIGGER = "2 seconds"
"""The floor does not depend on the trigger; a short one gives more batches in the same time."""
SKIPPED = 3
"""First batches left out: they pay for the Python workers' start."""
WARM_UP_BUDGET_S = 180.0
"""How long the skipped first batches may take before the measured ``seconds`` start anyway."""
DURATIONS = ("latestOffset", "queryPlanning", "addBatch", "walCommit", "commitOffsets", "triggerExecution")


def run_floor(folder: Path, seconds: float, timeout: float) -> dict[str, Any]:
    """Run the floor query for ``seconds`` in a process with the job's environment; its figures."""
    folder.mkdir(parents=True, exist_ok=True)
    settings = load_settings(home=folder)
    env = {**os.environ, **launch_env(settings, os.environ), "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-m", "streamwarden_bench.floor", str(folder), str(seconds)], env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"the floor query failed (exit {done.returncode}): {done.stderr[-2000:]}")
    figures: dict[str, Any] = json.loads(lines[-1])
    return figures


def summarize(durations: list[dict[str, int]]) -> dict[str, Any]:
    """The floor's figures from its batches' ``durationMs`` (the first :data:`SKIPPED` left out)."""
    kept = durations[SKIPPED:]
    seconds = np.array([d.get("triggerExecution", 0) / 1000 for d in kept])
    return {"batches": len(kept), "rows_per_batch": ROWS, "keys": KEYS,
            "duration_s": {**percentiles(seconds), "max": round(float(seconds.max()), 3)} if len(kept) else {},
            "durations_ms_per_batch": {k: round(float(np.mean([d.get(k, 0) for d in kept]))) for k in DURATIONS}
            if kept else {}}


def _query(folder: Path, seconds: float) -> list[dict[str, int]]:
    """Run the minimal query for ``seconds``; every batch's ``durationMs``."""
    import pandas as pd
    from pyspark.sql import DataFrame
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle, TimerValues

    from streamwarden.stream.spark_session import build_spark_session

    class Reader(DataSourceStreamReader):
        def initialOffset(self) -> dict[str, int]:
            return {"at": 0}

        def getDefaultReadLimit(self) -> ReadLimit:
            return ReadAllAvailable()

        def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
            return {"at": time.monotonic_ns()}  # a new batch at every trigger

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
            return [InputPartition(0), InputPartition(1)]  # the job reads with one task per core

        def read(self, partition: InputPartition) -> Iterator[tuple[int, bytes]]:
            for i in range(ROWS // 2):
                yield i % KEYS, b"x" * 100

        def commit(self, end: dict[str, int]) -> None:
            """Nothing to release."""

    class Source(DataSource):
        @classmethod
        def name(cls) -> str:
            return "streamwarden_floor"

        def schema(self) -> str:
            return "key INT, value BINARY"

        def streamReader(self, schema: Any) -> DataSourceStreamReader:
            return Reader()

    class Processor(StatefulProcessor):
        def init(self, handle: StatefulProcessorHandle) -> None:
            self.state = handle.getMapState("slots", "slot INT", "sessions BINARY", 600_000)

        def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame] | Iterator[Any],
                            timerValues: TimerValues) -> Iterator[pd.DataFrame]:
            count = sum(len(frame) for frame in rows)
            self.state.getValue((0,))
            self.state.updateValue((0,), (b"x" * 100,))
            yield pd.DataFrame({"key": [key[0]], "rows": [count]})

        def close(self) -> None:
            """Nothing to release."""

    settings = load_settings(home=folder, trigger_interval=TRIGGER)
    spark = build_spark_session(settings, app_name="streamwarden-floor")
    spark.dataSource.register(Source)
    frame = spark.readStream.format(Source.name()).load().groupBy("key").transformWithStateInPandas(
        statefulProcessor=Processor(), outputStructType="key INT, rows LONG", outputMode="Append",
        timeMode="ProcessingTime")

    def collect(batch: DataFrame, batch_id: int) -> None:
        batch.collect()

    query = (frame.writeStream.foreachBatch(collect).trigger(processingTime=TRIGGER)
             .option("checkpointLocation", str(folder / "checkpoint")).start())

    def durations() -> list[dict[str, int]]:
        return [dict(progress.durationMs) for progress in query.recentProgress if progress.numInputRows]

    # A busy machine can spend most of a fixed window starting the Python workers: measure after the warm-up.
    warm_by = time.monotonic() + WARM_UP_BUDGET_S
    while len(durations()) < SKIPPED and time.monotonic() < warm_by:
        time.sleep(0.5)
    time.sleep(seconds)
    query.stop()
    return durations()


if __name__ == "__main__":
    print(json.dumps(summarize(_query(Path(sys.argv[1]), float(sys.argv[2])))))
