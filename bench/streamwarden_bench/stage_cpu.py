"""The session stage's Python per record, without Spark: today's code against an earlier commit's, alternated.

What a stateful task's Python worker does to a bucket's records, step by step, on the main workload's shape
(the project's producer, its encoder): split the records by session, run the engine and the handler over each
session, build the output rows, add the folder columns, split them by folder. Each step is timed on the same
records, in one process per code under test, with the worker's garbage-collector settings; the best of
``--repeats`` passes counts. No Spark, no broker, no state store: seconds, not minutes, so that a change to the
per-record path is measured before the full benchmark runs it.

    make bench-stage BENCH_ARGS="--compare-ref HEAD~1"

Results: ``bench/results/stage-cpu/<UTC stamp>.json`` and ``.md`` (microseconds per record for each step, and
each code's ratio to the first).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from .engines import child_env
from .source import REPO, checkout, state

RESULTS = REPO / "bench" / "results" / "stage-cpu"
STEPS = ("split", "sessions", "rows", "folders", "folder_runs")
"""Unpack a bucket's payloads and split its records by session; run the engine; the output rows; their folder
columns; their split by folder."""
PAYLOAD_RECORDS = 12_500


def measure(records: int, repeats: int) -> dict[str, float]:
    """Microseconds per record of each step on ``records`` main-shape messages, the best of ``repeats`` passes
    (runs against whichever ``streamwarden`` is first on the path)."""
    import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
    from pyspark.sql.pandas.types import to_arrow_schema

    from streamwarden.local.producer import ProducerOptions, SessionSimulator
    from streamwarden.session_handler import load_handler
    from streamwarden.stream import worker_gc
    from streamwarden.stream.ipc import to_ipc
    from streamwarden.stream.sessions import packing
    from streamwarden.stream.sessions.engine import SessionPolicy
    from streamwarden.stream.sessions.packing import SESSION_KEY, unpack_records
    from streamwarden.stream.sessions.processor import SessionJobConfig, SessionProcessor, _records_by_session
    from streamwarden.stream.sessions.tables import session_rows_schema
    from streamwarden.stream.sink.batch_files import folder_runs, with_folder_columns
    from streamwarden.wire import DEMO_SCHEMA, encode

    options = ProducerOptions(prefix="stage", sites=3, partitions=4, sessions_per_site=66, rows_per_snapshot=100,
                              updates_per_session=200, max_messages=records, seed=1)
    simulator = SessionSimulator(options, "stage")
    start = datetime(2026, 11, 30, 22, 59, tzinfo=UTC)  # crosses an hour and a day
    topics, keys, values = [], [], []
    for index in range(records):
        topic, key, event = simulator.next_event(start + timedelta(milliseconds=index))
        topics.append(topic)
        keys.append(key)
        values.append(encode(event))
    table = pa.table({"topic": topics, "partition": pa.array([0] * records, pa.int32()),
                      "offset": pa.array(range(records), pa.int64()), "key": pa.array(keys, pa.binary()),
                      "value": pa.array(values, pa.binary()),
                      "timestamp": pa.array([start] * records, pa.timestamp("us", tz="UTC")),
                      SESSION_KEY: [key.decode() for key in keys]})
    # the operator's input: a bucket's records in several payloads, arrived out of order after the shuffle
    payloads = [to_ipc(table.slice(start, PAYLOAD_RECORDS)) for start in range(0, records, PAYLOAD_RECORDS)][::-1]
    order = getattr(packing, "kafka_order", None)  # before it, ``unpack_records`` sorted them itself

    def split() -> Any:
        unpacked = unpack_records(payloads)
        if order is None:
            return _records_by_session(unpacked)  # type: ignore[call-arg]  # an earlier commit's signature
        return _records_by_session(unpacked, order(unpacked))

    config = SessionJobConfig("streamwarden.stream.sessions.table_handler:TableReconstruction",
                              dict(DEMO_SCHEMA.to_dict()), SessionPolicy(), 60_000)
    processor = SessionProcessor(config)  # ``init`` would open the state store: set what the steps use
    processor.handler = load_handler(config.handler_path)
    processor.schema = DEMO_SCHEMA
    columns = processor.handler.output_columns(DEMO_SCHEMA)
    processor.handler_columns = [name for name, _ in columns]
    processor.rows_schema = to_arrow_schema(session_rows_schema(columns), timezone="UTC")
    worker_gc.spread_collections()
    # the operator runs a bucket (split, sessions, rows) with the collector paused, where the code does
    paused = getattr(worker_gc, "collections_paused", contextlib.nullcontext)

    def one_pass() -> dict[str, float]:
        seconds: dict[str, float] = {}
        with paused():
            by_session = _timed(seconds, "split", split)
            results = _timed(seconds, "sessions",
                             lambda: [processor._session(s, found, None) for s, found in by_session.items()])
            rows = _timed(seconds, "rows", lambda: pa.Table.from_batches([processor._rows(results)]))
        foldered = _timed(seconds, "folders", lambda: with_folder_columns(rows, "event_ts"))
        _timed(seconds, "folder_runs", lambda: list(folder_runs(foldered, ("source_topic", "event_date"))))
        return {step: seconds[step] / records * 1e6 for step in STEPS}

    passes = [one_pass() for _ in range(repeats)]
    return {step: min(p[step] for p in passes) for step in STEPS}


def _timed(seconds: dict[str, float], step: str, work: Callable[[], Any]) -> Any:
    began = time.perf_counter()
    result = work()
    seconds[step] = time.perf_counter() - began
    return result


def _run_child(root: Path, records: int, repeats: int) -> dict[str, float]:
    """:func:`measure` in a new process with ``root``'s ``include`` first on the path."""
    env = {**child_env(), "PYTHONPATH": os.pathsep.join([str(root / "include"), str(REPO / "bench")])}
    done = subprocess.run([sys.executable, "-m", "streamwarden_bench.stage_cpu", "--child", "--records", str(records),
                           "--repeats", str(repeats)], env=env, capture_output=True, text=True, check=True)
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def report(runs: dict[str, list[dict[str, float]]], records: int) -> str:
    """A table of the median microseconds per record of each step per code, and each code's ratio to the first."""
    def median(values: list[float]) -> float:
        ordered = sorted(values)
        return ordered[len(ordered) // 2]

    medians = {code: {step: median([run[step] for run in passes]) for step in STEPS} for code, passes in runs.items()}
    first = next(iter(medians.values()))
    lines = [f"The session stage's Python on {records:,} main-shape records (µs per record, median of "
             f"{len(next(iter(runs.values())))} alternated processes, each the best of its passes).", "",
             "| code | " + " | ".join(STEPS) + " | total | x first |", "|---" * (len(STEPS) + 3) + "|"]
    for code, steps in medians.items():
        total = sum(steps.values())
        lines.append(f"| {code} | " + " | ".join(f"{steps[s]:.2f}" for s in STEPS)
                     + f" | {total:.2f} | {total / sum(first.values()):.3f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="streamwarden_bench.stage_cpu", description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000, help="messages per pass (default %(default)s)")
    parser.add_argument("--repeats", type=int, default=3, help="passes per process; the best counts")
    parser.add_argument("--processes", type=int, default=3, help="processes per code, alternated")
    parser.add_argument("--compare-ref", help="an earlier commit whose code runs alternated with today's")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = parser.parse_args(argv)
    if a.child:
        print(json.dumps(measure(a.records, a.repeats)))
        return 0
    with tempfile.TemporaryDirectory(prefix="stage-cpu-") as scratch:
        codes = {"today": REPO}
        if a.compare_ref:
            ref = checkout(a.compare_ref, Path(scratch))
            codes[f"{a.compare_ref} ({ref.commit[:12]})"] = ref.root
        runs: dict[str, list[dict[str, float]]] = {code: [] for code in codes}
        for index in range(a.processes):
            for code, root in codes.items():
                runs[code].append(_run_child(root, a.records, a.repeats))
                print(f"{index + 1}/{a.processes} {code}: {runs[code][-1]}", flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H%M%SZ")
    text = report(runs, a.records)
    (RESULTS / f"{stamp}.md").write_text(text)
    (RESULTS / f"{stamp}.json").write_text(json.dumps({"records": a.records, "repeats": a.repeats, "runs": runs,
                                                       "source": state()}, indent=1) + "\n")
    print(text + f"results: {RESULTS / stamp}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
