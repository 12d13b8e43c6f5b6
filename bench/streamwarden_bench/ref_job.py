"""Child of the sink comparison: an earlier checkout's harness measures that checkout's job and verifies its output.

Run by path with the checkout's ``include`` and ``bench`` first on ``PYTHONPATH`` (and ``STREAMWARDEN_REPO``
set to it), so that ``streamwarden`` and ``streamwarden_bench`` below are that version's: its job
(``jobs/stream.py`` with its sink), its throughput measurement and its verification (its replay of its own
output). Reads a JSON job on stdin, prints one JSON result line.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import streamwarden
from streamwarden_bench.stream import run_throughput
from streamwarden_bench.verify import verify_streamwarden
from streamwarden_bench.workload import Workload, WorkloadSpec


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that the harness stops the job on the way out
    job = json.load(sys.stdin)
    checkout = Path(job["checkout"]).resolve()
    loaded = Path(streamwarden.__file__).resolve()
    if not loaded.is_relative_to(checkout):
        raise SystemExit(f"streamwarden imported from {loaded}, not from the checkout {checkout}")
    ends = {topic: {int(p): end for p, end in parts.items()} for topic, parts in job["ends"].items()}
    workload = Workload(WorkloadSpec(**job["spec"]), job["bootstrap"], ends, job["expected"], job["produce_rate"])
    stream, result = run_throughput(workload, Path(job["home"]), job["max_offsets"], job["trigger"], job["timeout"])
    stream.stop()
    result["max_offsets_per_trigger"] = job["max_offsets"]
    result["verification"] = verify_streamwarden(stream.settings.root("output"), ends, workload.expected).to_json()
    print(json.dumps(result, default=str), flush=True)


if __name__ == "__main__":
    main()
