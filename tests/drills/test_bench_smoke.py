"""A tiny run of the benchmark harness (baseline and Streamwarden only): it runs, writes its results, verifies.

The session restarts benchmark runs too, on 3 sites: its figures must add up (every batch counted once,
every site answered in both restarts, every row committed accounted for), whatever the durations.

The benchmarks themselves are not tests (``make bench``); this only keeps the harness working.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from streamwarden_bench.cli import results_stem

from fixtures import REPO

pytestmark = pytest.mark.slow


def test_tiny_bench_run_writes_verified_results(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMWARDEN_")}
    env["PYTHONPATH"] = str(REPO / "bench")
    command = [sys.executable, "-m", "streamwarden_bench", "--messages", "3000", "--sessions", "12", "--rows", "10",
               "--updates-per-session", "50", "--trigger", "1s", "--no-quix", "--skip-latency", "--skip-scaling",
               "--compaction-files", "40", "--vacuum-files", "100", "--validation-rows", "30000",
               "--restart-sites", "3", "--restart-sessions", "2", "--restart-rows", "5", "--restart-rate", "30",
               "--restart-jitter", "3s", "--restart-settle", "5", "--restart-baseline", "5",
               "--standby-kills", "1", "--standby-rate", "200",
               "--results-dir", str(tmp_path / "results"), "--work-dir", str(tmp_path / "work")]
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    (document,) = (tmp_path / "results").glob("*.json")
    assert document.with_name(f"{document.stem}-restarts.png").stat().st_size > 0
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
        assert 0 < main[engine]["peak_pss_mib"] <= main[engine]["peak_rss_mib"]  # shared pages split, not summed
    assert main["baseline"]["verification"]["rows"] == 3000
    stream = main["streamwarden"]
    assert stream["cold_start_s"] > 0 and stream["steady_batches"] >= 1
    assert stream["records"] == 3000  # the heartbeats count Kafka records, not the source's packed rows
    assert main["ratios"]["streamwarden_vs_baseline"] > 0
    goals = {g["name"]: g for g in results["goals"]}  # every goal listed; what this run did not measure: not met
    assert goals["throughput, default run"]["figure"] == main["ratios"]["streamwarden_vs_baseline"]
    assert goals["cold start"]["figure"] == stream["cold_start_s"]
    assert goals["peak RSS, default run"]["figure"] == stream["peak_rss_mib"]
    unmeasured = {"vs Quix, default run", "throughput, every other shape", "vs Quix, every other shape",
                  "fixed cost per batch", "p95 latency at half load", "kill -9 to the next batch, new process",
                  "RSS flat from 200 to 200k sessions"}
    assert {n for n, g in goals.items() if g["figure"] is None and g["met"] is None} == unmeasured
    assert "| goal | target | this run | margin | met |" in document.with_suffix(".md").read_text()
    standby = results["standby"]  # one kill -9 healed by the warm standby, on a stream of its own
    assert standby["verified"]["exactly_once"] and standby["verified"]["sessions_exact"], standby["verified"]
    (takeover,) = standby["takeovers"]
    assert takeover["standby"] and takeover["next_pid"] != takeover["killed_pid"]
    assert goals["kill -9 to the next batch, warm standby"]["figure"] == round(takeover["commit_s"], 2)
    assert standby["standby_rss_mib"]["max"] > 100  # a JVM and Python, waiting
    compaction = results["compaction"]
    assert (compaction["files"], compaction["files_after"], compaction["vacuum_deleted"]) == (40, 4, 100)
    assert compaction["ratio_to_baseline"] > 0 and compaction["ratio_with_proof"] > 0
    validation = results["validation"]
    assert validation["session_rows"] >= 29_000 and validation["passed"] is True  # whole snapshots: about 30k
    assert validation["ratio_to_goal"] > 0 and validation["expectations"] > 0
    check_restarts(results["restarts"])


def check_restarts(r: dict[str, Any]) -> None:
    """The restart benchmark's figures are consistent: no batch missed or counted twice, every site answered."""
    assert "error" not in r, r.get("trace")
    assert r["verification"]["ok"] is True, r["verification"]
    batches = r["batches"]
    assert [b["batch_id"] for b in batches] == list(range(len(batches))) and r["missed_batches"] == []
    assert sum(b["session_rows"] for b in batches) == r["verification"]["rows"]  # every committed row in a batch
    phases = {p["name"]: p for p in r["phases"]}
    assert list(phases) == ["baseline", "jittered", "between", "at_once"]
    ordered = list(phases.values())  # consecutive batches: none left out between the phases, none in two
    assert all(p["batches"] >= 1 and p["last_batch"] - p["first_batch"] + 1 == p["batches"] for p in ordered)
    assert all(a["last_batch"] + 1 == b["first_batch"] for a, b in itertools.pairwise(ordered))
    for name, jitter in (("jittered", 3.0), ("at_once", 0.0)):
        p = phases[name]
        assert p["jitter_s"] == jitter and p["answered"] == p["sites"] == 3 == p["producer_restarts"], p
        assert p["sessions_opened"] == 3 * 2
        assert p["all_answered_s"] >= jitter * 2 / 3 and p["after_last_turn_s"] >= 0  # no answer before its turn
        assert p["max_x_trigger"] == round(p["max_s"] / r["trigger_s"], 3)
        assert p["max_within_3x_trigger"] == (p["max_s"] <= 3 * r["trigger_s"])
        assert p["max_x_baseline"] == round(p["max_s"] / phases["baseline"]["max_s"], 3)
    assert r["verdict_jittered_max_within_3x_trigger"] == phases["jittered"]["max_within_3x_trigger"]
    assert r["producer"]["restarts"] == 2 * 3


def test_a_run_takes_the_next_free_results_name_of_the_day(tmp_path: Path) -> None:
    assert results_stem(tmp_path, "2026-11-25", "vm") == tmp_path / "2026-11-25-vm"  # none yet, and no folder
    for name in ("2026-11-25-vm.json", "2026-11-25-vm-2.md", "2026-11-25-vm-3-repeat.json",
                 "2026-11-25-db.example.com.png"):
        (tmp_path / name).write_text("")
    assert results_stem(tmp_path, "2026-11-25", "vm") == tmp_path / "2026-11-25-vm-3"  # -3-repeat is not -3
    assert results_stem(tmp_path, "2026-11-25", "db.example.com").name == "2026-11-25-db.example.com-2"
    assert results_stem(tmp_path, "2026-11-26", "vm").name == "2026-11-26-vm"


def test_a_work_dir_holding_a_run_is_refused_before_anything_starts(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMWARDEN_")}
    env["PYTHONPATH"] = str(REPO / "bench")
    (tmp_path / "work" / "main").mkdir(parents=True)  # what a run leaves: its job's checkpoint would go on
    run = subprocess.run([sys.executable, "-m", "streamwarden_bench", "--results-dir", str(tmp_path / "results"),
                          "--work-dir", str(tmp_path / "work")], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "is not empty" in run.stderr and "DATA_LOSS" in run.stderr
    assert not (tmp_path / "results").exists()
