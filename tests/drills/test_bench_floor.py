"""Spark's floor under the fixed cost (``streamwarden_bench.floor``): a real minimal stateful query on the job's
Spark settings, in a process of its own, and the report's reading of it."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamwarden_bench.floor import DURATIONS, KEYS, ROWS, SKIPPED, run_floor, summarize
from streamwarden_bench.report import floor_lines

pytestmark = pytest.mark.slow


def test_the_floor_query_runs_stateful_batches_and_reports_their_durations(tmp_path: Path) -> None:
    figures = run_floor(tmp_path / "floor", seconds=8, timeout=420)

    assert figures["batches"] >= 1 and (figures["rows_per_batch"], figures["keys"]) == (ROWS, KEYS)
    split = figures["durations_ms_per_batch"]
    assert set(split) == set(DURATIONS) and 0 < split["addBatch"] <= split["triggerExecution"]
    assert 0 < figures["duration_s"]["p50"] <= figures["duration_s"]["max"]
    assert (tmp_path / "floor" / "checkpoint" / "state").is_dir()  # the operator kept state: a stateful batch
    (line,) = floor_lines({"spark_floor": figures})
    assert f"p50 {figures['duration_s']['p50']} s" in line


def test_the_first_batches_are_left_out_and_a_failed_floor_is_reported_as_such() -> None:
    durations = [{"triggerExecution": 9000, "addBatch": 8000}] * SKIPPED + [
        {"triggerExecution": 400, "addBatch": 300}, {"triggerExecution": 600, "addBatch": 500}]
    figures = summarize(durations)

    assert figures["batches"] == 2 and figures["duration_s"]["p50"] == 0.5 and figures["duration_s"]["max"] == 0.6
    assert figures["durations_ms_per_batch"]["addBatch"] == 400
    assert summarize(durations[:SKIPPED])["duration_s"] == {}
    assert floor_lines({"spark_floor": {"error": "RuntimeError: no Java"},
                        "offsets_query_listed_ms": {"p50": 41.5, "p95": 60.2},
                        "offsets_query_known_ends_ms": {"p50": 6.1, "p95": 7.3}}) == [
        "Spark's own floor: not measured (RuntimeError: no Java).",
        "The broker's answer to the source's offsets query at a trigger, after the run: every partition listed, "
        "then fetched (the first trigger after a start) p50 41.5 ms, p95 60.2 ms; fetched at the ends known from "
        "the previous query, nothing new (every later trigger, at its cheapest) p50 6.1 ms, p95 7.3 ms."]
