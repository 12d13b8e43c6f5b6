"""Streamwarden as the warden starts it: ``spark-submit jobs/stream.py`` detached, settings in STREAMWARDEN_*.

Throughput comes from the heartbeat (rows / batch duration of every batch after the first, which pays for
the Python workers' start) and from the manifests (rows / wall time between the first and the last
commit). Latency: the Kafka timestamp of each record against the ``committed_at`` of the manifest that
made its rows visible. Cold start: launch to the first manifest. Restart: ``kill -9`` of the whole process
group to the next manifest.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from streamwarden.processes import live
from streamwarden.runfiles.checkpoint import commit_batches
from streamwarden.runfiles.heartbeat import Heartbeat, read_heartbeat
from streamwarden.settings import Settings, load_settings
from streamwarden.tables.location import SESSION_ROWS
from streamwarden.stream.sink.commit_protocol import Manifest, load_manifests
from streamwarden.warden.launcher import read_launch_record, start_stream_detached

from .baseline import consume_ranges
from .measure import PeakRss, Sampler, epoch, group, percentiles, tree
from .replay import caught_up
from .workload import Ends, Workload, log_ends, produce


def stream_settings(workload: Workload, home: Path, max_offsets: int, trigger: str) -> Settings:
    """The job's settings: the session pipeline on the workload's topics, large batches."""
    return load_settings(home=home, bootstrap_servers=workload.bootstrap, topic_pattern=workload.spec.pattern,
                         pipeline="sessions", max_offsets_per_trigger=max_offsets, trigger_interval=trigger)


class HeartbeatLog(Sampler):
    """Collects the heartbeat of every progress event (the file is rewritten each batch)."""

    def __init__(self, path: Path, interval: float = 0.2) -> None:
        super().__init__(interval)
        self.path = path
        self.batches: dict[tuple[str, int], Heartbeat] = {}

    def sample(self) -> None:
        with contextlib.suppress(OSError, ValueError, TypeError):
            beat = read_heartbeat(self.path)
            if beat is not None and beat.event == "progress" and beat.batch_id is not None:
                self.batches[(beat.run_id, beat.batch_id)] = beat

    def data_batches(self) -> list[Heartbeat]:
        return [b for _, b in sorted(self.batches.items(), key=lambda item: item[1].written_at)
                if b.num_input_rows > 0 and b.batch_duration_ms]


@dataclass
class StreamJob:
    """One launched job (a process group led by spark-submit)."""

    settings: Settings
    pgid: int = 0
    launched_at: float = 0.0
    launches: list[Path] = field(default_factory=list)

    def start(self) -> StreamJob:
        log = self.settings.root("run") / "logs" / f"stream-{len(self.launches)}.log"
        self.launches.append(log)
        self.launched_at = time.time()
        start_stream_detached(self.settings, log)
        record = read_launch_record(self.settings)
        assert record is not None
        self.pgid = record.pid
        return self

    def manifests(self) -> list[Manifest]:
        table = self.settings.root("output") / SESSION_ROWS
        return load_manifests(table) if table.exists() else []

    def caught_up(self, ends: Ends) -> bool:
        return caught_up(self.settings.checkpoint_location, ends)

    def wait_until(self, condition: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if not live([self.pgid]):
                raise RuntimeError(f"the stream exited while waiting for {what}; see {self.launches[-1]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {what} after {timeout:.0f}s; see {self.launches[-1]}")
            time.sleep(0.2)

    def processes(self) -> list[psutil.Process]:
        """The leader's tree (PySpark's worker daemons run in process groups of their own) and its group."""
        found = {p.pid: p for p in tree(self.pgid)} if self.pgid else {}
        found.update((p.pid, p) for p in (group(self.pgid)() if self.pgid else []))
        return list(found.values())

    def kill9(self) -> float:
        """SIGKILL the process group and every descendant; returns when it was sent (epoch seconds)."""
        members = self.processes()
        killed = time.time()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pgid, signal.SIGKILL)
        for process in members:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        psutil.wait_procs(members, timeout=30)
        return killed

    def stop(self, timeout: float = 180) -> None:
        """Drain through the stop marker; SIGKILL what is left after ``timeout``."""
        self.settings.stop_marker_path.touch()
        with contextlib.suppress(psutil.NoSuchProcess, psutil.TimeoutExpired):
            psutil.Process(self.pgid).wait(timeout)
        self.kill9()


def records(manifest: Manifest) -> int:
    return sum(end - start for parts in manifest.ranges.values() for start, end in parts.values())


def throughput(beats: list[Heartbeat], manifests: list[Manifest]) -> dict[str, Any]:
    """Steady state: every data batch after the first (heartbeat), and commit to commit (manifests)."""
    steady = beats[1:]
    rows = sum(b.num_input_rows for b in steady)
    busy = sum(b.batch_duration_ms or 0 for b in steady) / 1000
    result: dict[str, Any] = {
        "batches": len(beats), "steady_batches": len(steady),
        "msg_per_s": round(rows / busy, 1) if busy else None,
        "first_batch": {"rows": beats[0].num_input_rows, "duration_s": (beats[0].batch_duration_ms or 0) / 1000}
        if beats else None,
    }
    if len(manifests) > 1:
        span = epoch(manifests[-1].committed_at) - epoch(manifests[0].committed_at)
        result["commit_to_commit_msg_per_s"] = round(sum(records(m) for m in manifests[1:]) / span, 1)
    durations: dict[str, float] = {}
    for beat in steady:
        for name, ms in beat.durations_ms.items():
            durations[name] = durations.get(name, 0) + ms
    result["durations_ms_per_batch"] = {k: round(v / len(steady)) for k, v in sorted(durations.items())}
    result["state"] = steady[-1].state if steady else []
    return result


def run_throughput(workload: Workload, home: Path, max_offsets: int, trigger: str,
                   timeout: float) -> tuple[StreamJob, dict[str, Any]]:
    """Cold start on the whole backlog until every offset is committed; the job keeps running."""
    job = StreamJob(stream_settings(workload, home, max_offsets, trigger))
    with HeartbeatLog(job.settings.heartbeat_path) as beats, PeakRss(job.processes) as rss:
        job.start()
        try:
            job.wait_until(lambda: job.caught_up(workload.ends), timeout, "catch-up on the backlog")
            last = commit_batches(job.settings.checkpoint_location)[-1]  # its progress event follows the commit
            with contextlib.suppress(TimeoutError):
                job.wait_until(lambda: any(b.batch_id == last for b in beats.batches.values()), 10, "last heartbeat")
        except BaseException:
            job.kill9()
            raise
    manifests = job.manifests()
    result = throughput(beats.data_batches(), manifests)
    result.update(cold_start_s=round(epoch(manifests[0].committed_at) - job.launched_at, 2),
                  peak_rss_mib=rss.peak_mib)
    return job, result


def latency(bootstrap: str, starts: Ends, ends: Ends, manifests: list[Manifest], until: float) -> dict[str, Any]:
    """Kafka timestamp -> manifest ``committed_at`` of every record committed before ``until`` (epoch s)."""
    stamps: dict[tuple[str, int], np.ndarray] = {}
    for topic, parts in ends.items():
        for partition, end in parts.items():
            stamps[(topic, partition)] = np.zeros(end - starts.get(topic, {}).get(partition, 0), np.int64)
    for messages in consume_ranges(bootstrap, starts, ends):
        for m in messages:
            topic, partition, offset = str(m.topic()), int(m.partition() or 0), int(m.offset() or 0)
            stamps[(topic, partition)][offset - starts.get(topic, {}).get(partition, 0)] = m.timestamp()[1]
    samples = []
    for manifest in manifests:
        committed = epoch(manifest.committed_at)
        if committed >= until:
            continue
        for topic, planned in manifest.ranges.items():
            for partition, (start, end) in planned.items():
                base = starts.get(topic, {}).get(partition, 0)
                if start < base:
                    continue
                samples.append(committed - stamps[(topic, partition)][start - base:end - base] / 1000)
    values = np.concatenate(samples) if samples else np.array([])
    worst = round(float(values.max()), 3) if len(values) else None
    return {"records": len(values), **percentiles(values), "max": worst}


def run_latency_and_restart(job: StreamJob, workload: Workload, rate: float, seconds: float,
                            timeout: float) -> tuple[dict[str, Any], Ends, dict[str, Any]]:
    """Produce at ``rate`` for ``2 * seconds``: latency over the first half, then ``kill -9`` and restart.

    Returns the latency and restart figures, the new log ends and the expected tables of the new sessions.
    """
    settings = workload.settings()
    options = workload.spec.options(rate=rate, duration=2 * seconds, max_messages=0, seed=workload.spec.seed + 1)
    reports: list[Any] = []
    producer = threading.Thread(target=lambda: reports.append(produce(settings, options)), daemon=True)
    producer.start()
    time.sleep(seconds)
    killed = job.kill9()
    job.start()
    job.wait_until(lambda: any(epoch(m.committed_at) > killed for m in job.manifests()), timeout,
                   "a batch committed after the restart")
    first_after = min(epoch(m.committed_at) for m in job.manifests() if epoch(m.committed_at) > killed)
    producer.join()
    ends = log_ends(workload.bootstrap, workload.spec.pattern)
    job.wait_until(lambda: job.caught_up(ends), timeout, "catch-up after the restart")
    result = {"target_rate": round(rate, 1), "produced_rate": reports[0].rate,
              **latency(workload.bootstrap, workload.ends, ends, job.manifests(), killed)}
    return {"latency_s": result, "restart_s": round(first_after - killed, 2)}, ends, reports[0].expected_tables
