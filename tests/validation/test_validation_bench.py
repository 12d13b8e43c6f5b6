"""The validation benchmark's tables and timing on a small table (the 10M-row figure is `make bench`'s job)."""

from __future__ import annotations

from pathlib import Path

from streamwarden_bench.validation import run_validation_bench


def test_the_benchmark_builds_clean_tables_and_times_their_validation(tmp_path: Path) -> None:
    figures = run_validation_bench(tmp_path / "bench", rows=40_000)
    assert figures.passed and figures.session_rows == 40_000 and figures.topic_partitions == 8
    assert figures.quarantine_rows == figures.offsets - figures.session_rows // 4
    assert figures.validate_s < 20 and figures.to_json()["within_goal"]
