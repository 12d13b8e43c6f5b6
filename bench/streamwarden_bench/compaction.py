"""Compaction benchmark: ``maintain_tables``' compaction against a plain pyarrow read-and-rewrite, and vacuum.

One table shaped like the stream's output (topic, partition, offset, a row key, values, a 64-byte
payload; partitioned by topic and date) is made of many small zstd Parquet files, committed to a Delta
table in one transaction as the stream would have over many batches. Then, on the same files:

* **baseline**: per partition, pyarrow reads the small files and writes one zstd file (what any
  compaction must at least do), no Delta, no proof;
* **compaction**: :func:`streamwarden.maintenance.steps.compact`, partition by partition (delta-rs
  ``optimize.compact`` and its commit) and the proof of every commit; the proof is timed apart by
  proving the same commits again;
* **vacuum**: a table of ``vacuum_files`` tiny files, all removed by one commit, vacuumed with a zero
  retention: the time to delete them.

Throughput is input MB/s and rows/s; the ratio is compaction's throughput over the baseline's (goal >= 0.8).
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.dataset as ds  # type: ignore[import-untyped, unused-ignore]
import pyarrow.parquet as pq  # type: ignore[import-untyped, unused-ignore]
from deltalake import CommitProperties, DeltaTable
from deltalake.transaction import AddAction, RemoveAction

from streamwarden.maintenance import steps
from streamwarden.maintenance.compaction import new_run_id
from streamwarden.maintenance.proof import prove
from streamwarden.maintenance.request import MaintenanceRequest
from streamwarden.maintenance.settings import MiB, load_maintenance_settings
from streamwarden.settings import load_settings
from streamwarden.tables.location import SESSION_ROWS, TableLocation
from streamwarden.tables.statistics import file_statistics

SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                    ("row_key", pa.string()), ("amount", pa.float64()), ("payload", pa.string()),
                    ("date", pa.string())])
PARTITION_BY = ["topic", "date"]
PARTITIONS = (("orders", "2026-11-23"), ("orders", "2026-11-24"), ("payments", "2026-11-23"),
              ("payments", "2026-11-24"))


@dataclass(frozen=True)
class CompactionFigures:
    """One compaction benchmark run."""

    files: int
    rows: int
    input_mb: float
    baseline_s: float
    compaction_s: float  # optimize and commit, every partition (compact + prove minus the proof)
    proof_s: float
    files_after: int
    vacuum_files: int
    vacuum_deleted: int
    vacuum_s: float

    @property
    def ratio(self) -> float:
        """Compaction's throughput over the baseline's (same input: the time ratio inverted)."""
        return self.baseline_s / self.compaction_s

    def to_json(self) -> dict[str, Any]:
        figures = asdict(self)
        for name, seconds in (("baseline", self.baseline_s), ("compaction", self.compaction_s),
                              ("compaction_with_proof", self.compaction_s + self.proof_s)):
            figures[f"{name}_mb_per_s"] = round(self.input_mb / seconds, 2)
            figures[f"{name}_rows_per_s"] = round(self.rows / seconds)
        figures["ratio_to_baseline"] = round(self.ratio, 3)
        figures["ratio_with_proof"] = round(self.baseline_s / (self.compaction_s + self.proof_s), 3)
        return figures


def _small_files(root: Path, files: int, rows_per_file: int) -> tuple[list[AddAction], int, int]:
    """Write ``files`` small Parquet files into the partition folders; their add actions, rows and bytes."""
    actions, rows, size = [], 0, 0
    for number in range(files):
        topic, date = PARTITIONS[number % len(PARTITIONS)]
        first = (number // len(PARTITIONS)) * rows_per_file
        offsets = pa.array(range(first, first + rows_per_file), pa.int64())
        data = pa.table({
            "topic": [topic] * rows_per_file, "partition": pa.array([number % 3] * rows_per_file, pa.int32()),
            "offset": offsets, "row_key": pa.array([f"k{o % 97}" for o in offsets.to_pylist()]),
            "amount": pa.compute.cast(offsets, pa.float64()), "payload": ["x" * 64] * rows_per_file})
        relative = f"batch-{number:06d}/topic={topic}/date={date}/part-00000.zstd.parquet"
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(data, path, compression="zstd")
        stat = path.stat()
        actions.append(AddAction(relative, stat.st_size, {"topic": topic, "date": date}, int(stat.st_mtime * 1000),
                                 True, json.dumps(file_statistics(path))))
        rows += rows_per_file
        size += stat.st_size
    return actions, rows, size


def _baseline(root: Path, actions: list[AddAction], out: Path) -> float:
    """pyarrow: read each partition's small files, write one zstd file; seconds."""
    started = time.monotonic()
    for topic, date in PARTITIONS:
        paths = [str(root / a.path) for a in actions if a.partition_values == {"topic": topic, "date": date}]
        table = ds.dataset(paths, format="parquet").to_table()
        target = out / f"topic={topic}" / f"date={date}"
        target.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, target / "part-0.zstd.parquet", compression="zstd")
    return time.monotonic() - started


def _vacuum(root: Path, files: int) -> tuple[int, float]:
    """Commit ``files`` tiny files, remove them all in one commit, vacuum at zero retention: deleted, seconds."""
    actions, _, _ = _small_files(root, files, 10)
    table = DeltaTable.create(str(root), SCHEMA, partition_by=PARTITION_BY)
    table.create_write_transaction(list(actions), mode="append", schema=SCHEMA, partition_by=PARTITION_BY)
    now = int(time.time() * 1000)
    removes: list[AddAction | RemoveAction] = [
        RemoveAction(a.path, False, now, a.size, dict(a.partition_values)) for a in actions]
    table.create_write_transaction(removes, mode="append", schema=SCHEMA, partition_by=PARTITION_BY,
                                   commit_properties=CommitProperties(custom_metadata={"bench": "remove all"}))
    started = time.monotonic()
    deleted = table.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False, full=True)
    return len(deleted), time.monotonic() - started


def run_compaction_bench(work: Path, files: int = 2000, rows_per_file: int = 2000,
                         vacuum_files: int = 10_000) -> CompactionFigures:
    """Build the tables under ``work`` (removed afterwards) and measure."""
    work.mkdir(parents=True, exist_ok=True)
    try:
        settings = load_settings(home=work / "home", output_root=work / "out")
        location = TableLocation.of(settings, SESSION_ROWS)
        root = settings.root("output") / SESSION_ROWS
        table = location.create(SCHEMA, PARTITION_BY)
        actions, rows, size = _small_files(root, files, rows_per_file)
        table.create_write_transaction(list(actions), mode="append", schema=SCHEMA, partition_by=PARTITION_BY)
        baseline_s = _baseline(root, actions, work / "baseline")

        maintenance = load_maintenance_settings()
        request = MaintenanceRequest((SESSION_ROWS,), maintenance.target_file_size,
                                     maintenance.small_file_bytes, maintenance.min_files, False)
        started = time.monotonic()
        done = steps.compact(settings, request, steps.plan(settings, request), new_run_id())
        with_proof = time.monotonic() - started
        started = time.monotonic()
        assert all(prove(location, c.version).holds for c in done if c.version is not None)
        proof_s = time.monotonic() - started
        files_after = len(pa.table(location.open().get_add_actions()))
        deleted, vacuum_s = _vacuum(work / "vacuum", vacuum_files)
        return CompactionFigures(files, rows, round(size / MiB, 2), round(baseline_s, 3),
                                 round(max(with_proof - proof_s, 1e-6), 3), round(proof_s, 3), files_after,
                                 vacuum_files, deleted, round(vacuum_s, 3))
    finally:
        shutil.rmtree(work, ignore_errors=True)
