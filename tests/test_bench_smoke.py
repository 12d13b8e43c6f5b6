"""A tiny run of the benchmark harness (baseline and Streamwarden only): it runs, writes its results, verifies.

The benchmarks themselves are not tests (``make bench``); this only keeps the harness working.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]


def test_tiny_bench_run_writes_verified_results(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMWARDEN_")}
    env["PYTHONPATH"] = str(REPO / "bench")
    command = [sys.executable, "-m", "streamwarden_bench", "--messages", "3000", "--sessions", "12", "--rows", "10",
               "--updates-per-session", "50", "--trigger", "1s", "--no-quix", "--skip-latency", "--skip-scaling",
               "--compaction-files", "40", "--vacuum-files", "100", "--validation-rows", "30000",
               "--results-dir", str(tmp_path / "results"), "--work-dir", str(tmp_path / "work")]
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    (document,) = (tmp_path / "results").glob("*.json")
    assert document.with_suffix(".png").stat().st_size > 0 and document.with_suffix(".md").exists()
    results = json.loads(document.read_text())
    assert results["verified"] is True and results["scaling"] == []
    assert {"date", "host", "versions", "elapsed_s"} <= results["meta"].keys()
    main = results["main"]
    assert main["workload"]["messages"] == 3000 and main["quix"] == {"skipped": "disabled (--no-quix)"}
    assert "sinks" not in main  # the sink comparison (an earlier commit's job) is opt-in: --compare-sink-ref
    for engine in ("baseline", "streamwarden"):
        verdict = main[engine]["verification"]
        assert verdict["ok"] is True and verdict["problems"] == [], verdict
        assert main[engine]["msg_per_s"] > 0 and main[engine]["peak_rss_mib"] > 0
    assert main["baseline"]["verification"]["rows"] == 3000
    stream = main["streamwarden"]
    assert stream["cold_start_s"] > 0 and stream["steady_batches"] >= 1
    assert main["ratios"]["streamwarden_vs_baseline"] > 0
    compaction = results["compaction"]
    assert (compaction["files"], compaction["files_after"], compaction["vacuum_deleted"]) == (40, 4, 100)
    assert compaction["ratio_to_baseline"] > 0 and compaction["ratio_with_proof"] > 0
    validation = results["validation"]
    assert validation["session_rows"] >= 29_000 and validation["passed"] is True  # whole snapshots: about 30k
    assert validation["ratio_to_goal"] > 0 and validation["expectations"] > 0
