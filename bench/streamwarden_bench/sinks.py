"""The sink comparison: the job of an earlier commit (its own sink) alternated with today's on one workload.

``--compare-sink-ref aa2af02`` (the last commit with the manifest sink) extracts that commit's tree with
``git archive`` into the scratch folder (no worktree to register or remove) and runs its job through its
own harness in a child (:mod:`streamwarden_bench.ref_job`): its code end to end, its verification. Runs
alternate (today's, the ref's, today's, ...) so that drifting machine load hits both; each sink's median
counts only when every one of its runs was verified.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import traceback
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .engines import child_env
from .report import rate
from .source import Checkout
from .workload import Workload

SINKS = ("delta", "ref")
"""Today's job (the Delta sink) and the ref's job."""


def run_ref(ref: Checkout, workload: Workload, home: Path, *, max_offsets: int, trigger: str,
            timeout: float) -> dict[str, Any]:
    """The ref's job on ``workload`` from a cold start, measured and verified by the ref's harness."""
    home.mkdir(parents=True, exist_ok=True)
    job = {"checkout": str(ref.root), "spec": asdict(workload.spec), "bootstrap": workload.bootstrap,
           "ends": workload.ends, "expected": workload.expected, "produce_rate": workload.produce_rate,
           "home": str(home), "max_offsets": max_offsets, "trigger": trigger, "timeout": timeout}
    env = {**child_env(), "STREAMWARDEN_REPO": str(ref.root),
           "PYTHONPATH": os.pathsep.join([str(ref.root / "include"), str(ref.root / "bench")])}
    log = home / "child.log"
    with open(log, "ab") as err:
        child = subprocess.Popen([sys.executable, str(Path(__file__).with_name("ref_job.py"))], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=err, cwd=home, env=env)
        try:
            out, _ = child.communicate(json.dumps(job).encode(), timeout=2 * timeout)
        except BaseException:  # the child stops its job on SIGTERM (its harness kills the job on the way out)
            child.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(120)
            child.kill()
            raise
    if child.returncode != 0:
        raise RuntimeError(f"the {ref.ref} job's harness exited with {child.returncode}; see {log}")
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return result


def alternate(runs: dict[str, Callable[[int], dict[str, Any]]], repeats: int,
              say: Callable[[str], None]) -> list[dict[str, Any]]:
    """Each sink's run in turn, ``repeats`` rounds; a failed run is recorded, not raised."""
    series: list[dict[str, Any]] = []
    for repeat in range(1, repeats + 1):
        for sink, run in runs.items():
            load = [round(v, 2) for v in os.getloadavg()]
            say(f"[sinks] {sink} run {repeat} of {repeats} (load average {load[0]})")
            try:
                result = run(repeat)
            except Exception as exc:  # recorded; the series goes on
                result = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-2000:]}
            series.append({"sink": sink, "repeat": repeat, "load_average_at_start": load, **result})
            say(f"[sinks] {sink} run {repeat}: {result.get('msg_per_s')} msg/s, "
                f"verified={result.get('verification', {}).get('ok')} {result.get('error', '')}")
    return series


def _median(values: list[float | None]) -> float | None:
    """The median, ``None`` when a run is missing (failed or wrong: a wrong answer gets no figure)."""
    if not values or any(v is None for v in values):
        return None
    return round(statistics.median(v for v in values if v is not None), 1)


def summary(series: list[dict[str, Any]], baseline: float | None) -> dict[str, Any]:
    """Median msg/s per sink (heartbeat and commit to commit), the Delta/ref ratio and each to the baseline."""
    medians = {sink: _median([rate(r) for r in series if r["sink"] == sink]) for sink in SINKS}
    commit_to_commit = {sink: _median([r.get("commit_to_commit_msg_per_s") if rate(r) else None
                                       for r in series if r["sink"] == sink]) for sink in SINKS}

    def ratio(a: float | None, b: float | None) -> float | None:
        return round(a / b, 3) if a and b else None

    delta_vs_ref = ratio(medians["delta"], medians["ref"])
    return {"median_msg_per_s": medians, "median_commit_to_commit_msg_per_s": commit_to_commit,
            "delta_vs_ref": delta_vs_ref, "delta_within_10_percent": None if delta_vs_ref is None
            else delta_vs_ref >= 0.9, "x_baseline": {sink: ratio(medians[sink], baseline) for sink in SINKS}}
