"""The session job's output without Spark: ``session_rows`` and ``quarantine`` committed by the real DeltaSink,
a checkpoint's offset and commit logs as Spark writes them, and damage done through delta-rs.

Every offset goes to exactly one table: every fifth to ``quarantine`` (one row), the others to
``session_rows`` as a snapshot of ``ROWS_PER_OFFSET`` rows (one per ``row_id``; stamped when written, offset 0
the start of its partition's session); with the records pipeline,
every offset to ``records`` (one row). Files lie in the batch
folder the sink planned, one folder per partition value, without the partition column (as Spark writes them).
"""

from __future__ import annotations

import json
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.parquet as pq  # type: ignore[import-untyped, unused-ignore]
from deltalake import DeltaTable
from deltalake.transaction import AddAction, RemoveAction

from streamwarden.settings import Settings, load_settings
from streamwarden.stream.sink.delta_sink import DeltaSink
from streamwarden.tables.location import QUARANTINE, RECORDS, SESSION_ROWS, TableLocation
from streamwarden.tables.ranges import IntervalIndex, OffsetRanges
from streamwarden.tables.statistics import file_statistics

ROWS_PER_OFFSET = 3
PARTITION_BY = ["source_topic"]
SCHEMAS = {
    SESSION_ROWS: pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                             ("session_id", pa.string()), ("event_ts", pa.timestamp("us", tz="UTC")),
                             ("boundary", pa.string()), ("restart_request", pa.string()), ("row_id", pa.string()),
                             ("amount", pa.float64()), ("source_topic", pa.string())]),
    QUARANTINE: pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                           ("key", pa.binary()), ("value", pa.binary()),
                           ("kafka_timestamp", pa.timestamp("us", tz="UTC")), ("error_class", pa.string()),
                           ("source_topic", pa.string())]),
}
SCHEMAS[RECORDS] = SCHEMAS[QUARANTINE]  # one row per offset, like quarantine


def settings_for(tmp_path: Path, **overrides: object) -> Settings:
    return load_settings(home=tmp_path / "home", output_root=tmp_path / "out", **overrides)


def quarantined(offsets: np.ndarray) -> np.ndarray:  # type: ignore[type-arg]
    return offsets % 5 == 0


def rows_for(name: str, topic: str, partition: int, start: int, end: int) -> pa.Table:
    """The rows table ``name`` gets of offsets ``[start, end)`` (no partition column: it is in the folder)."""
    offsets = np.arange(start, end, dtype=np.int64)
    if name == QUARANTINE:
        return rows_at(name, topic, partition, offsets[quarantined(offsets)])
    if name == SESSION_ROWS:
        return rows_at(name, topic, partition, offsets[~quarantined(offsets)])
    return rows_at(name, topic, partition, offsets)


def rows_at(name: str, topic: str, partition: int, offsets: np.ndarray | list[int]) -> pa.Table:  # type: ignore[type-arg]
    """The rows of table ``name`` for exactly ``offsets`` (``ROWS_PER_OFFSET`` each in ``session_rows``)."""
    offsets = np.asarray(offsets, dtype=np.int64)
    if name != SESSION_ROWS:
        return pa.table({"topic": pa.array([topic] * len(offsets), pa.string()),
                         "partition": pa.array(np.full(len(offsets), partition, np.int32)), "offset": offsets,
                         "key": pa.array([f"s{partition}".encode()] * len(offsets), pa.binary()),
                         "value": pa.array([b"bad"] * len(offsets), pa.binary()),
                         "kafka_timestamp": pa.array([datetime.now(UTC)] * len(offsets), pa.timestamp("us", tz="UTC")),
                         "error_class": pa.array(["INVALID_JSON"] * len(offsets), pa.string())})
    mine = np.repeat(offsets, ROWS_PER_OFFSET)
    row_ids = np.tile(np.array([f"r{i}" for i in range(ROWS_PER_OFFSET)]), len(offsets))
    return pa.table({"topic": pa.array([topic] * len(mine), pa.string()),
                     "partition": pa.array(np.full(len(mine), partition, np.int32)), "offset": mine,
                     "session_id": pa.array([f"s{partition}"] * len(mine), pa.string()),
                     "event_ts": pa.array([datetime.now(UTC)] * len(mine), pa.timestamp("us", tz="UTC")),
                     "boundary": pa.array(np.where(mine == 0, "start", None), pa.string()),
                     "restart_request": pa.nulls(len(mine), pa.string()),
                     "row_id": pa.array(row_ids, pa.string()), "amount": pa.array(mine.astype(np.float64))})


def sink(settings: Settings, name: str) -> DeltaSink:
    return DeltaSink(TableLocation.of(settings, name), SCHEMAS[name], PARTITION_BY)


def commit_batch(settings: Settings, ranges: OffsetRanges, batch_id: int,
                 tables: tuple[str, ...] = (SESSION_ROWS, QUARANTINE)) -> dict[str, int]:
    """What the job's foreachBatch does for each table: plan, write the rows of what it lacks, commit.
    The table versions made."""
    versions = {}
    for name in tables:
        table_sink = sink(settings, name)
        plan = table_sink.plan(ranges, batch_id)
        if plan.fully_committed:
            continue
        write_covers(Path(plan.write_dir), name, plan.covers)
        versions[name] = table_sink.commit(plan).version
    return versions


def write_covers(folder: Path, name: str, covers: IntervalIndex) -> None:
    for topic, parts in covers.items():
        target = folder / f"source_topic={topic}"
        target.mkdir(parents=True, exist_ok=True)
        for partition, intervals in parts.items():
            for start, end in intervals:
                middle = (start + end) // 2
                for lo, hi, half in ((start, middle, "a"), (middle, end, "b")):
                    data = rows_for(name, topic, partition, lo, hi)
                    if data.num_rows:
                        pq.write_table(data, target / f"part-{partition}-{lo}-{half}.zstd.parquet", compression="zstd")


def write_checkpoint(settings: Settings, batches: list[OffsetRanges], committed: int | None = None) -> Path:
    """A Spark checkpoint whose offset log holds the end offsets of ``batches`` (batch ids 0, 1, ...) and whose
    commit log holds the batches up to ``committed`` (all when None)."""
    folder = settings.checkpoint_location
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "offsets").mkdir(parents=True)
    (folder / "commits").mkdir()
    last = len(batches) - 1 if committed is None else committed
    for batch_id, ranges in enumerate(batches):
        ends = {t: {str(p): end for p, (_, end) in parts.items()} for t, parts in ranges.items()}
        (folder / "offsets" / str(batch_id)).write_text(f'v1\n{{"batchWatermarkMs":0}}\n{json.dumps(ends)}\n')
        if batch_id <= last:
            (folder / "commits" / str(batch_id)).write_text('v1\n{"nextBatchWatermarkMs":0}\n')
    return folder


def table_root(settings: Settings, name: str) -> Path:
    return Path(TableLocation.of(settings, name).uri)


def remove_file(settings: Settings, name: str, relative: str) -> int:
    """Drop one committed file from the table's log with a RemoveAction commit (the file stays on disk)."""
    table = DeltaTable(str(table_root(settings, name)))
    actions = {a["path"]: a for a in pa.table(table.get_add_actions(flatten=False)).to_pylist()}
    action = actions[relative]
    remove = RemoveAction(relative, True, int(time.time() * 1000), action["size_bytes"], action["partition"])
    table.create_write_transaction([remove], mode="append", schema=table.schema(), partition_by=PARTITION_BY)
    table.update_incremental()
    return table.version()


def add_copy(settings: Settings, name: str, relative: str, folder: str = "copied") -> int:
    """Commit a copy of a committed file again, as a second writer would (no app transaction)."""
    root = table_root(settings, name)
    source = root / relative
    copy = root / folder / source.parent.name / source.name
    copy.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(source, copy)
    table = DeltaTable(str(root))
    add = AddAction(copy.relative_to(root).as_posix(), copy.stat().st_size,
                    {"source_topic": copy.parent.name.split("=", 1)[1]}, int(copy.stat().st_mtime * 1000), True,
                    json.dumps(file_statistics(copy)))
    table.create_write_transaction([add], mode="append", schema=table.schema(), partition_by=PARTITION_BY)
    table.update_incremental()
    return table.version()


def committed_paths(settings: Settings, name: str) -> list[str]:
    table = DeltaTable(str(table_root(settings, name)))
    return sorted(pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist())
