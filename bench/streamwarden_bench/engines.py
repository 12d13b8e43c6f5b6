"""Running the baseline and the peer as measured child processes, and verifying their output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .measure import PeakRss, tree
from .verify import verify_baseline, verify_quix
from .workload import Workload

BENCH = Path(__file__).resolve().parents[1]
QUIX_PYTHON = BENCH / ".quix-venv" / "bin" / "python"


def run_measured(command: list[str], job: dict[str, Any], cwd: Path, timeout: float,
                 env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run a child that reads a JSON job on stdin and prints a JSON result line; adds its peak RSS."""
    log = cwd / "child.log"
    with open(log, "ab") as err:
        process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, cwd=cwd,
                                   env=env)
        with PeakRss(lambda: tree(process.pid)) as rss:
            started = time.monotonic()
            try:
                out, _ = process.communicate(json.dumps(job).encode(), timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                raise
    if process.returncode != 0:
        raise RuntimeError(f"{command[-1]} exited with {process.returncode}; see {log}")
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    result.update(peak_rss_mib=rss.peak_mib, peak_pss_mib=rss.peak_pss_mib, wall_s=round(time.monotonic() - started, 2))
    return result


def run_baseline(workload: Workload, folder: Path, timeout: float) -> dict[str, Any]:
    folder.mkdir(parents=True, exist_ok=True)
    ends = {t: {str(p): e for p, e in parts.items()} for t, parts in workload.ends.items()}
    env = {"PYTHONPATH": str(BENCH)}
    result = run_measured([sys.executable, "-m", "streamwarden_bench.baseline", str(folder / "rows")],
                          {"bootstrap": workload.bootstrap, "ends": ends}, folder, timeout,
                          env={**child_env(), **env})
    result["verification"] = verify_baseline(folder / "rows", workload.ends, workload.expected).to_json()
    return result


def quix_version(python: Path) -> str:
    probe = subprocess.run([str(python), "-c", "import quixstreams; print(quixstreams.__version__)"],
                           capture_output=True, text=True, check=True)
    return probe.stdout.strip()


def quix_unavailable(python: Path) -> str | None:
    """Why the peer cannot run, or ``None``."""
    if not python.exists():
        return f"no Quix venv at {python.parent.parent} (make bench creates it from bench/requirements-quix.txt)"
    try:
        quix_version(python)
    except subprocess.CalledProcessError as exc:
        return f"quixstreams does not import: {exc.stderr.strip()[-300:]}"
    return None


def run_quix(workload: Workload, folder: Path, python: Path, timeout: float, idle_timeout: float = 10.0
             ) -> dict[str, Any]:
    folder.mkdir(parents=True, exist_ok=True)
    job = {"bootstrap": workload.bootstrap, "topics": sorted(workload.ends), "group": f"{workload.spec.prefix}-quix",
           "directory": "quix_rows", "idle_timeout": idle_timeout}
    result = run_measured([str(python), str(Path(__file__).with_name("quix_peer.py"))], job, folder, timeout,
                          env=child_env())
    result["version"] = quix_version(python)
    result["verification"] = verify_quix(folder / "quix_rows", workload.ends, workload.expected).to_json()
    return result


def child_env() -> dict[str, str]:
    """This environment without Streamwarden settings or a Python path (each child is given its own)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("STREAMWARDEN_", "PYTHONPATH"))}
