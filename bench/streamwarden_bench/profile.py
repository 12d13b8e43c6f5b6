"""``python -m streamwarden_bench.profile``: where the stream's CPU goes while it reads a backlog.

Produces the main workload's shape on a local broker, starts the job as the warden does (``spark-submit
jobs/stream.py``) with Java Flight Recorder on the driver JVM, and once the first batch is committed samples
every Python process of the job with py-spy for ``--seconds``, while it counts the CPU time of every process.
Writes ``bench/results/profile/<UTC time>/``: ``README.md`` (CPU seconds per process role, the functions with
the most own time per role, the JVM's hottest methods), the collapsed stacks per process (``*.collapsed``, the
input of any flame graph tool) and the JFR recording (``driver.jfr``; ``jfr print`` reads it).

py-spy comes from ``bench/requirements-profile.txt`` (``make profile`` installs it); the JVM's recorder and
``jfr`` come with the JDK.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

from streamwarden.local.broker import LocalBroker
from streamwarden.logs.bounds import JVM_LOG, PYTHON_LOG, log_files
from streamwarden.process_setup import DRIVER_MEMORY, driver_java_options

from .engines import BENCH
from .stream import StreamJob, stream_settings
from .workload import WorkloadSpec, generate

PYTHON_ROLES = (
    ("python streaming source", "python_streaming_source_runner"),
    ("python state pre-init", "transform_with_state_driver_worker"),
    ("python workers", "worker_daemon"),
    ("python driver", "jobs/stream.py"),
)
"""A Python process's role, by the first of these its command line contains (the workers: the daemon and its
forks)."""


@dataclass(frozen=True)
class Sampled:
    """One process profiled: its role, pid, the collapsed stacks file and the samples in it."""

    role: str
    pid: int
    stacks: Path
    samples: int


def role_of(process: psutil.Process) -> str:
    """The process's part in the job: the driver JVM, a Python role (:data:`PYTHON_ROLES`), or a helper (the
    spark-submit shell scripts)."""
    with contextlib.suppress(psutil.Error):
        name = process.name()
        if name == "java":
            return "driver JVM"
        if not name.startswith("python"):
            return f"helper ({name})"
        line = " ".join(process.cmdline())
        return next((role for role, mark in PYTHON_ROLES if mark in line), "python, other")
    return "gone"


def cpu_seconds(processes: list[psutil.Process]) -> dict[int, float]:
    found = {}
    for process in processes:
        with contextlib.suppress(psutil.Error):
            times = process.cpu_times()
            found[process.pid] = times.user + times.system
    return found


START_MARKS = (
    (PYTHON_LOG, "the lease taken", re.compile(r"lease taken")),
    (JVM_LOG, "Python data sources looked up", re.compile(r"Loading static Python Data Sources")),
    (PYTHON_LOG, "the query started", re.compile(r"query \S+ started")),
    (JVM_LOG, "the source's Python runner starting", re.compile(r"Initializing Python runner")),
    (JVM_LOG, "the source's runner answering", re.compile(r"Finish initializing with logical plan")),
    (JVM_LOG, "the state's pre-init runner done", re.compile(r"Runner initialization succeeded")),
    (JVM_LOG, "the first batch's first task", re.compile(r"Starting task 0\.0 in stage")),
    (JVM_LOG, "the state stores loaded", re.compile(r"Loading checkpoint files for version")),
    (PYTHON_LOG, "the first batch committed", re.compile(r"batch \d+ committed to session_rows")),
)
"""What a start goes through, each found by the first line of its log that matches, in the order expected."""
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)[.,](\d{3})")


def start_timeline(logs: Path, launched_at: float) -> list[tuple[str, float | None]]:
    """Seconds from the launch to each of :data:`START_MARKS` (``None``: not in the logs)."""
    found: list[tuple[str, float | None]] = []
    for log, what, pattern in START_MARKS:
        at = None
        for path in log_files(logs, log):
            for line in path.read_text(errors="replace").splitlines():
                stamp = _STAMP.match(line)
                if stamp and pattern.search(line):
                    moment = datetime.strptime(stamp[1], "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
                    at = round(moment.timestamp() + int(stamp[2]) / 1000 - launched_at, 2)
                    break
            if at is not None:
                break
        found.append((what, at))
    return found


_TASK = re.compile(r"\[batchId = (\d+)\] Finished task \S+ in stage (\d+)\.\d+ \(TID \d+\) in (\d+) ms")


def stage_split(logs: Path) -> list[dict[str, Any]]:
    """Per batch, its Spark stages in order (the first reads Kafka and packs, the second runs the sessions and
    writes the files): tasks, the longest task and all tasks' time, from the driver JVM's log."""
    tasks: dict[int, dict[int, list[int]]] = {}
    for path in log_files(logs, JVM_LOG):
        for match in _TASK.finditer(path.read_text(errors="replace")):
            batch, stage, ms = map(int, match.groups())
            tasks.setdefault(batch, {}).setdefault(stage, []).append(ms)
    return [{"batch": batch, "stages": [{"tasks": len(ms), "longest_ms": max(ms), "total_ms": sum(ms)}
                                        for _, ms in sorted(stages.items())]}
            for batch, stages in sorted(tasks.items())]


def collapsed(path: Path) -> Counter[str]:
    """py-spy's ``raw`` output: ``frame;frame;... count`` per line, outermost frame first."""
    stacks: Counter[str] = Counter()
    if path.exists():
        for line in path.read_text(errors="replace").splitlines():
            stack, _, count = line.rpartition(" ")
            if stack and count.isdigit():
                stacks[stack] += int(count)
    return stacks


def own_time(stacks: Counter[str], top: int) -> list[tuple[str, int]]:
    """The innermost frame of each sample, summed: where the time is spent, not who called it."""
    frames: Counter[str] = Counter()
    for stack, count in stacks.items():
        frames[stack.rsplit(";", 1)[-1]] += count
    return frames.most_common(top)


def jvm_hot_methods(recording: Path, top: int) -> list[tuple[str, int]]:
    """The JVM's execution samples by their top frame (``jfr print --json``), most first."""
    jfr = shutil.which("jfr")
    if jfr is None or not recording.exists():
        return []
    out = subprocess.run([jfr, "print", "--json", "--events", "jdk.ExecutionSample", str(recording)],
                         capture_output=True, text=True, check=True).stdout
    methods: Counter[str] = Counter()
    for event in json.loads(out)["recording"]["events"]:
        frames = event["values"]["stackTrace"]["frames"]
        if frames:
            method = frames[0]["method"]
            methods[f"{method['type']['name']}.{method['name']}"] += 1
    return methods.most_common(top)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="streamwarden_bench.profile", description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=3_000_000)
    parser.add_argument("--seconds", type=float, default=30.0, help="seconds of sampling after the first batch")
    parser.add_argument("--rate", type=int, default=67, help="py-spy samples per second per process")
    parser.add_argument("--idle", action="store_true",
                        help="sample waiting threads too (py-spy --idle): where the workers wait, not only where "
                             "they compute")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=500_000)
    parser.add_argument("--trigger", default="3s")
    parser.add_argument("--py-spy", default=shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy")))
    parser.add_argument("--results", type=Path, default=BENCH / "results" / "profile")
    args = parser.parse_args(argv)
    if not Path(args.py_spy).exists():
        print(f"py-spy not found at {args.py_spy}: make profile installs it", file=sys.stderr)
        return 2
    started = datetime.now(UTC)
    out = args.results / started.strftime("%Y-%m-%dT%H%M%SZ")
    out.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="profile-") as folder, LocalBroker() as broker:
        spec = WorkloadSpec(prefix="profile", messages=args.messages)
        print(f"producing {args.messages:,} messages", flush=True)
        workload = generate(spec, broker.bootstrap_servers)
        settings = stream_settings(workload, Path(folder) / "home", args.max_offsets_per_trigger, args.trigger)
        recorder = f"-XX:StartFlightRecording=filename={out / 'driver.jfr'},settings=profile,dumponexit=true"
        os.environ["SPARK_SUBMIT_OPTS"] = " ".join([*driver_java_options(DRIVER_MEMORY), recorder])
        job = StreamJob(settings).start()
        try:
            job.wait_until(lambda: len(job.commits()) >= 1, 600, "the first batch")
            timeline = start_timeline(settings.run_paths.logs, job.launched_at)
            document = _sample(job, out, args)
            document["start_s"] = timeline
            job.wait_until(lambda: job.caught_up(workload.ends), 1800, "catch-up on the backlog")
        finally:
            job.stop()
        document["stages"] = stage_split(settings.run_paths.logs)
    document["options"] = {k: str(v) for k, v in vars(args).items()}
    document["hot_jvm_methods"] = jvm_hot_methods(out / "driver.jfr", 25)
    (out / "profile.json").write_text(json.dumps(document, indent=2, sort_keys=True))
    (out / "README.md").write_text(_markdown(document, started, args))
    print(f"results: {out}")
    return 0


def _sample(job: StreamJob, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    """py-spy on every Python process of the job for ``args.seconds``, and every process's CPU time across it."""
    processes = job.processes()
    before = cpu_seconds(processes)
    spies = []
    for process in processes:
        role = role_of(process)
        if role.startswith("python"):
            path = out / f"{role.replace(' ', '-')}-{process.pid}.collapsed"
            spies.append((role, process.pid, path, subprocess.Popen(
                [args.py_spy, "record", "--pid", str(process.pid), "--duration", str(int(args.seconds)),
                 "--rate", str(args.rate), "--format", "raw", "--nonblocking", "--output", str(path),
                 *(["--idle"] if args.idle else [])],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)))
    t0 = time.monotonic()
    for *_, spy in spies:
        spy.wait(args.seconds + 60)
    wall = time.monotonic() - t0
    after = cpu_seconds(processes)
    cpu: dict[str, float] = {}
    for process in processes:
        if process.pid in after:
            role = role_of(process)
            cpu[role] = cpu.get(role, 0.0) + after[process.pid] - before.get(process.pid, 0.0)
    sampled = [Sampled(role, pid, path, sum(collapsed(path).values())) for role, pid, path, _ in spies]
    by_role: dict[str, Counter[str]] = {}
    for s in sampled:
        by_role.setdefault(s.role, Counter()).update(collapsed(s.stacks))
    by_cpu = sorted(cpu.items(), key=lambda item: -item[1])
    return {"wall_s": round(wall, 1), "cpu_s_by_role": {role: round(seconds, 1) for role, seconds in by_cpu},
            "processes": [{"role": s.role, "pid": s.pid, "samples": s.samples, "stacks": s.stacks.name}
                          for s in sampled],
            "own_time_by_role": {role: own_time(stacks, 20) for role, stacks in by_role.items()}}


def _markdown(document: dict[str, Any], started: datetime, args: argparse.Namespace) -> str:
    lines = [f"# Where the stream's CPU goes ({started:%Y-%m-%d %H:%M} UTC, {psutil.cpu_count()} cores)", "",
             f"Main workload's shape, {args.messages:,} messages, batches of up to {args.max_offsets_per_trigger:,} "
             f"records, trigger {args.trigger}; sampled for {document['wall_s']} s from the first committed batch "
             f"(py-spy at {args.rate}/s on each Python process" + (", waiting threads sampled too" if args.idle else "")
             + ", Java Flight Recorder on the driver JVM).", "",
             "| process role | CPU s in the window | share |", "| --- | --- | --- |"]
    total = sum(document["cpu_s_by_role"].values()) or 1.0
    for role, seconds in document["cpu_s_by_role"].items():
        lines.append(f"| {role} | {seconds} | {seconds / total:.0%} |")
    lines += ["", "## The start: seconds from the launch", "", "| step | s |", "| --- | --- |"]
    lines += [f"| {what} | {'-' if at is None else at} |" for what, at in document["start_s"]]
    lines += ["", "## Each batch's stages (driver JVM log): tasks, longest task s / all tasks' s", "",
              "| batch | stage 1 (read, pack) | stage 2 (sessions, files) |", "| --- | --- | --- |"]
    for batch in document["stages"]:
        cells = [f"{st['tasks']} tasks, {st['longest_ms'] / 1000:.2f} / {st['total_ms'] / 1000:.2f}"
                 for st in batch["stages"]]
        lines.append(f"| {batch['batch']} | " + " | ".join(cells) + " |")
    for role, frames in document["own_time_by_role"].items():
        samples = sum(p["samples"] for p in document["processes"] if p["role"] == role) or 1
        lines += ["", f"## {role}: own time (innermost frame), {samples:,} samples", "",
                  "| frame | samples | share |", "| --- | --- | --- |"]
        lines += [f"| `{frame}` | {count:,} | {count / samples:.1%} |" for frame, count in frames]
    hot = document["hot_jvm_methods"]
    if hot:
        samples = sum(count for _, count in hot)
        lines += ["", "## driver JVM: hottest methods (JFR execution samples, top frame; share of the top 25)", "",
                  "| method | samples | share |", "| --- | --- | --- |"]
        lines += [f"| `{method}` | {count:,} | {count / samples:.1%} |" for method, count in hot]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
