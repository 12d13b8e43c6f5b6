"""The validation benchmark's tables and timing on a small table (the 10M-row figure is `make bench`'s job)."""

from __future__ import annotations

from pathlib import Path

from streamwarden_bench.cli import build_parser
from streamwarden_bench.validation import run_validation_bench


def test_the_benchmark_builds_clean_tables_and_times_their_validation(tmp_path: Path) -> None:
    figures = run_validation_bench(tmp_path / "bench", rows=40_000)
    assert figures.passed and figures.session_rows == 40_000 and figures.topic_partitions == 8
    assert figures.quarantine_rows == figures.offsets - figures.session_rows // 4
    assert figures.expectations > 20 and figures.gx_import_s > 0 and figures.reconciliation_s > 0
    assert figures.content_s > 0
    document = figures.to_json()
    assert document["goal_s"] == 20 and document["ratio_to_goal"] == round(figures.validate_s / 20, 2)
    assert set(document) >= {"validate_s", "reconciliation_s", "content_s", "expectations_s", "within_goal"}


def test_the_bench_command_runs_or_skips_it() -> None:
    assert build_parser().parse_args([]).validation_rows == 10_000_000
    args = build_parser().parse_args(["--skip-validation", "--validation-rows", "1000000"])
    assert args.skip_validation and args.validation_rows == 1_000_000
