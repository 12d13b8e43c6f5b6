"""Validation benchmark: a 10M-row ``session_rows`` table reconciled and checked with GX (goal: <= 20 s, 2 cores).

The tables are shaped like the session job's output and committed the way it commits them (the real
:class:`~streamwarden.stream.sink.delta_sink.DeltaSink`: plan, Parquet files in the batch folder, one Delta
commit per table with the offsets it covers): ``topics`` x ``partitions`` topic-partitions, every fifth
offset in ``quarantine`` (one row, with its Kafka timestamp) and the others in ``session_rows`` as snapshots
of ``rows_per_offset`` rows (one per row id, with an event time), until ``session_rows`` holds ``rows`` rows.
A checkpoint that committed the batch sits beside them. Then, Kafka not asked:

- ``validate_s``, the goal's figure: one run of :func:`streamwarden.validation.steps.validate` with every
  offline check (pin, checks 1 and 2, the data expectations and their Data Docs) in a fresh interpreter, as
  an Airflow task runs it, so Great Expectations' import (about 5 s) is paid (it overlaps checks 1 and 2);
- ``reconciliation_s``: checks 1 and 2 alone; ``content_s``: checks 1 and 2 with check 6 (every data file read
  whole and hashed against the digest its commit recorded), so that check 6's cost is their difference;
  ``expectations_s``: the data checks alone, GX already
  imported (``gx_import_s``, timed in a fresh interpreter).

``python -m streamwarden_bench`` runs it (``--validation-rows``, ``--skip-validation``); alone:

    PYTHONPATH=bench .venv/bin/python -c "from streamwarden_bench.validation import main; main()"
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.parquet as pq  # type: ignore[import-untyped, unused-ignore]

from streamwarden.settings import Settings, load_settings
from streamwarden.stream.sink.delta_sink import DeltaSink
from streamwarden.tables.location import QUARANTINE, SESSION_ROWS, TableLocation, pipeline_tables
from streamwarden.tables.ranges import OffsetRanges
from streamwarden.validation.coverage import check_coverage
from streamwarden.validation.request import Check, ValidationRequest
from streamwarden.validation.settings import ValidationSettings, load_validation_settings
from streamwarden.validation.snapshot import pin
from streamwarden.validation.steps import validate

GOAL_SECONDS = 20.0
ROWS_PER_FILE = 1_000_000
PARTITION_BY = ["source_topic"]
UTC_US = pa.timestamp("us", tz="UTC")
SCHEMAS = {
    SESSION_ROWS: pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                             ("session_id", pa.string()), ("seq", pa.int64()), ("event_ts", UTC_US),
                             ("op", pa.string()), ("row_id", pa.string()), ("amount", pa.float64()),
                             ("source_topic", pa.string())]),
    QUARANTINE: pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                           ("value", pa.binary()), ("kafka_timestamp", UTC_US), ("error_class", pa.string()),
                           ("source_topic", pa.string())]),
}


def offline() -> ValidationSettings:
    """Every offline check, with a range and freshness to evaluate (the tables pass them)."""
    return load_validation_settings(kafka=False, freshness="48h", ranges={"amount": [0, None]})


RECONCILIATION = frozenset({Check.COVERAGE, Check.CHECKPOINT})
WITH_CONTENT = RECONCILIATION | {Check.CONTENT}


@dataclass(frozen=True)
class ValidationFigures:
    """One validation benchmark run."""

    session_rows: int
    quarantine_rows: int
    offsets: int
    topic_partitions: int
    files: int
    build_s: float
    validate_s: float  # every offline check in a fresh interpreter, GX's import included: the goal's figure
    reconciliation_s: float  # checks 1 and 2
    content_s: float  # checks 1, 2 and 6 (every file hashed): check 6's cost is the difference
    expectations_s: float  # the data checks and their Data Docs, GX imported
    gx_import_s: float  # importing GX (and the data checks) in a fresh interpreter
    expectations: int  # expectations evaluated
    passed: bool

    @property
    def within_goal(self) -> bool:
        return self.validate_s <= GOAL_SECONDS

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "rows_per_s": round((self.session_rows + self.quarantine_rows) / self.validate_s),
                "goal_s": GOAL_SECONDS, "ratio_to_goal": round(self.validate_s / GOAL_SECONDS, 2),
                "within_goal": self.within_goal}


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
    start = np.datetime64(int((datetime.now(UTC) - timedelta(hours=1)).timestamp() * 1e6), "us")
    times = pa.array(start + offsets.astype("timedelta64[ms]"), UTC_US)  # a millisecond per offset
    if name == QUARANTINE:
        return pa.table({**base, "value": pa.array(np.full(count, b"not json", dtype=object), pa.binary()),
                         "kafka_timestamp": times,
                         "error_class": pa.array(np.full(count, "INVALID_JSON", dtype=object), pa.string())})
    row_ids = np.array([f"r{i:06d}" for i in range(rows_per_offset)], dtype=object)
    return pa.table({**base, "session_id": pa.array(np.full(count, f"s-{partition}", dtype=object), pa.string()),
                     "seq": pa.array(offsets), "event_ts": times,
                     "op": pa.array(np.full(count, "snapshot", dtype=object), pa.string()),
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
    """Build the tables under ``work`` (emptied first), then time their validation (see the module)."""
    shutil.rmtree(work, ignore_errors=True)
    settings = load_settings(home=work / "home", output_root=work / "out")
    started = time.perf_counter()
    ranges, files = build_tables(settings, rows=rows)
    write_checkpoint(settings, ranges)
    built = time.perf_counter() - started
    together = _in_fresh_interpreter(work)
    started = time.perf_counter()
    report = validate(settings, offline(), ValidationRequest(pipeline_tables(settings), RECONCILIATION))
    reconciliation = time.perf_counter() - started
    started = time.perf_counter()
    hashed = validate(settings, offline(), ValidationRequest(pipeline_tables(settings), WITH_CONTENT))
    content = time.perf_counter() - started
    from streamwarden.validation.expectations.run import check_expectations  # GX: imported once, not timed here

    tables = pin(settings, pipeline_tables(settings))
    partitions = check_coverage(tables).partitions
    outcome = check_expectations(settings, offline(), tables, checked=pipeline_tables(settings),
                                 partitions=partitions, run_id="bench")
    session = sum(p.rows.get(SESSION_ROWS, 0) for p in report.partitions)
    quarantine = sum(p.rows.get(QUARANTINE, 0) for p in report.partitions)
    offsets = sum(e - s for parts in ranges.values() for s, e in parts.values())
    return ValidationFigures(session, quarantine, offsets, len(report.partitions), files, round(built, 2),
                             together["validate_s"], round(reconciliation, 2), round(content, 2), outcome.seconds,
                             together["gx_import_s"], outcome.evaluated,
                             report.passed and hashed.passed and not outcome.findings and bool(together["passed"]))


_FRESH = """
import json, sys, time
from pathlib import Path
from streamwarden.settings import load_settings
from streamwarden.validation.steps import validate
from streamwarden_bench.validation import offline
work = Path(sys.argv[1])
settings = load_settings(home=work / "home", output_root=work / "out")
started = time.perf_counter()
report = validate(settings, offline())
validate_s = time.perf_counter() - started
print(json.dumps({"validate_s": round(validate_s, 2), "passed": report.passed, "checks": report.checks,
                  "findings": [f.line() for f in report.findings[:5]]}))
"""
_IMPORT = """
import json, time
started = time.perf_counter()
import streamwarden.validation.expectations.run
print(json.dumps({"gx_import_s": round(time.perf_counter() - started, 2)}))
"""


def _in_fresh_interpreter(work: Path) -> dict[str, Any]:
    """Every offline check in a new interpreter (as an Airflow task runs them), and GX's import time."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parent.parent),
                                                                     os.environ.get("PYTHONPATH", "")]))}
    figures: dict[str, Any] = {}
    for script, args in ((_FRESH, [str(work)]), (_IMPORT, [])):
        done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, env=env,
                              check=False, timeout=900)
        if done.returncode:
            raise RuntimeError(f"the validation benchmark's run failed: {done.stderr[-2000:]}")
        figures.update(json.loads(done.stdout.strip().splitlines()[-1]))
    if Check.EXPECTATIONS.value not in figures["checks"]:
        raise RuntimeError(f"the timed run made no data checks: {figures['checks']}")
    return figures


def main() -> None:
    """Run the benchmark in a temporary folder and print its figures as JSON."""
    with tempfile.TemporaryDirectory(prefix="sw-validation-bench-") as folder:
        print(json.dumps(run_validation_bench(Path(folder)).to_json(), indent=2))
