"""Validation benchmark: offset reconciliation of a 10M-row ``session_rows`` table (goal: <= 20 s on 2 cores).

The tables are shaped like the session job's output and committed the way it commits them (the real
:class:`~streamwarden.stream.sink.delta_sink.DeltaSink`: plan, Parquet files in the batch folder, one Delta
commit per table with the offsets it covers): ``topics`` x ``partitions`` topic-partitions, every fifth
offset in ``quarantine`` (one row) and the others in ``session_rows`` as snapshots of ``rows_per_offset``
rows (one per row id), until ``session_rows`` holds ``rows`` rows. A checkpoint that committed the batch
sits beside them. Then :func:`streamwarden.validation.steps.validate` (Kafka not asked) is timed: pin the
versions, check 1 (DuckDB over the files) and check 2. Not wired into ``python -m streamwarden_bench``.

    PYTHONPATH=bench .venv/bin/python -c "from streamwarden_bench.validation import main; main()"
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.parquet as pq  # type: ignore[import-untyped, unused-ignore]

from streamwarden.settings import Settings, load_settings
from streamwarden.stream.sink.delta_sink import DeltaSink
from streamwarden.stream.sink.ranges import OffsetRanges
from streamwarden.tables.location import QUARANTINE, SESSION_ROWS, TableLocation
from streamwarden.validation.settings import load_validation_settings
from streamwarden.validation.steps import validate

GOAL_SECONDS = 20.0
ROWS_PER_FILE = 1_000_000
PARTITION_BY = ["source_topic"]
SCHEMAS = {
    SESSION_ROWS: pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                             ("session_id", pa.string()), ("seq", pa.int64()), ("op", pa.string()),
                             ("row_id", pa.string()), ("amount", pa.float64()), ("source_topic", pa.string())]),
    QUARANTINE: pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                           ("value", pa.binary()), ("error_class", pa.string()), ("source_topic", pa.string())]),
}


@dataclass(frozen=True)
class ValidationFigures:
    """One validation benchmark run."""

    session_rows: int
    quarantine_rows: int
    offsets: int
    topic_partitions: int
    files: int
    build_s: float
    validate_s: float
    passed: bool

    @property
    def within_goal(self) -> bool:
        return self.validate_s <= GOAL_SECONDS

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "rows_per_s": round((self.session_rows + self.quarantine_rows) / self.validate_s),
                "goal_s": GOAL_SECONDS, "within_goal": self.within_goal}


def build_tables(settings: Settings, *, rows: int, topics: int = 2, partitions: int = 4,
                 rows_per_offset: int = 4) -> tuple[OffsetRanges, int]:
    """Commit ``session_rows`` (``rows`` rows) and ``quarantine`` as one batch each; the ranges and the files."""
    tps = [(f"sites-{t}", p) for t in range(topics) for p in range(partitions)]
    session_offsets = rows // rows_per_offset // len(tps)
    end = session_offsets * 5 // 4  # one offset in five (0, 5, 10, ...) is quarantined
    while end - (end + 4) // 5 < session_offsets:
        end += 1
    ranges: OffsetRanges = {}
    for topic, partition in tps:
        ranges.setdefault(topic, {})[partition] = (0, end)
    files = 0
    for name in (SESSION_ROWS, QUARANTINE):
        sink = DeltaSink(TableLocation.of(settings, name), SCHEMAS[name], PARTITION_BY)
        plan = sink.plan(ranges, 0)
        for topic, partition in tps:
            folder = Path(plan.write_dir) / f"source_topic={topic}"
            folder.mkdir(parents=True, exist_ok=True)
            offsets = np.arange(0, end, dtype=np.int64)
            quarantined = offsets % 5 == 0
            mine = offsets[quarantined] if name == QUARANTINE else np.repeat(offsets[~quarantined], rows_per_offset)
            for number, start in enumerate(range(0, len(mine), ROWS_PER_FILE)):
                chunk = mine[start:start + ROWS_PER_FILE]
                pq.write_table(_rows(name, topic, partition, chunk, rows_per_offset),
                               folder / f"part-{partition:05d}-{number:03d}.zstd.parquet", compression="zstd")
                files += 1
        sink.commit(plan)
    return ranges, files


def _rows(name: str, topic: str, partition: int, offsets: npt.NDArray[np.int64], rows_per_offset: int) -> pa.Table:
    count = len(offsets)
    base = {"topic": pa.array(np.full(count, topic, dtype=object), pa.string()),
            "partition": pa.array(np.full(count, partition, np.int32)), "offset": pa.array(offsets)}
    if name == QUARANTINE:
        return pa.table({**base, "value": pa.array(np.full(count, b"not json", dtype=object), pa.binary()),
                         "error_class": pa.array(np.full(count, "INVALID_JSON", dtype=object), pa.string())})
    row_ids = np.array([f"r{i:06d}" for i in range(rows_per_offset)], dtype=object)
    return pa.table({**base, "session_id": pa.array(np.full(count, f"s-{partition}", dtype=object), pa.string()),
                     "seq": pa.array(offsets), "op": pa.array(np.full(count, "snapshot", dtype=object), pa.string()),
                     "row_id": pa.array(np.resize(row_ids, count), pa.string()),
                     "amount": pa.array(offsets.astype(np.float64))})


def write_checkpoint(settings: Settings, ranges: OffsetRanges) -> None:
    """A checkpoint whose batch 0 (the tables' batch) is committed."""
    folder = settings.checkpoint_location
    (folder / "offsets").mkdir(parents=True, exist_ok=True)
    (folder / "commits").mkdir(exist_ok=True)
    ends = {t: {str(p): end for p, (_, end) in parts.items()} for t, parts in ranges.items()}
    (folder / "offsets" / "0").write_text(f'v1\n{{"batchWatermarkMs":0}}\n{json.dumps(ends)}\n')
    (folder / "commits" / "0").write_text('v1\n{"nextBatchWatermarkMs":0}\n')


def run_validation_bench(work: Path, rows: int = 10_000_000) -> ValidationFigures:
    """Build the tables under ``work`` (emptied first), then time one validation of them."""
    shutil.rmtree(work, ignore_errors=True)
    settings = load_settings(home=work / "home", output_root=work / "out")
    started = time.perf_counter()
    ranges, files = build_tables(settings, rows=rows)
    write_checkpoint(settings, ranges)
    built = time.perf_counter() - started
    started = time.perf_counter()
    report = validate(settings, load_validation_settings(kafka=False))
    seconds = time.perf_counter() - started
    session = sum(p.rows.get(SESSION_ROWS, 0) for p in report.partitions)
    quarantine = sum(p.rows.get(QUARANTINE, 0) for p in report.partitions)
    offsets = sum(e - s for parts in ranges.values() for s, e in parts.values())
    return ValidationFigures(session, quarantine, offsets, len(report.partitions), files, round(built, 2),
                             round(seconds, 2), report.passed)


def main() -> None:
    """Run the benchmark in a temporary folder and print its figures as JSON."""
    with tempfile.TemporaryDirectory(prefix="sw-validation-bench-") as folder:
        print(json.dumps(run_validation_bench(Path(folder)).to_json(), indent=2))
