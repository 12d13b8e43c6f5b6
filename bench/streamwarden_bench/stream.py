"""Streamwarden as the warden starts it: ``spark-submit jobs/stream.py`` detached, settings in STREAMWARDEN_*.

Throughput comes from the heartbeat (rows / batch duration of every batch after the first, which pays for
the Python workers' start) and from the Delta commits of ``session_rows`` (records / wall time between the
first and the last commit). Latency: the Kafka timestamp of each record against the timestamp of the Delta
commit that made its rows visible. Cold start: launch to the first batch commit. Restart: ``kill -9`` of the
whole process group to the next batch commit.

The commits come from the table's history (:func:`batch_commits`): each batch commit carries its batch id
and planned ranges in ``streamwarden.*`` commit metadata. The log's clean-up (after
``delta.logRetentionDuration``, 30 days by default) drops old commit infos, far beyond a benchmark run.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from streamwarden.kafka.admin import TopicPartitionId, fetch_high_watermarks, list_partitions, metadata_consumer
from streamwarden.logs.bounds import PYTHON_LOG, log_files
from streamwarden.processes import live
from streamwarden.runfiles.checkpoint import commit_batches
from streamwarden.runfiles.heartbeat import Heartbeat, read_heartbeat
from streamwarden.settings import Settings, load_settings
from streamwarden.tables.commit_rate import RANGES_KEY
from streamwarden.tables.location import SESSION_ROWS, TableLocation
from streamwarden.tables.ranges import IntervalIndex, OffsetRanges, canonical_ranges, merge_intervals, uncommitted
from streamwarden.testing.replay import caught_up
from streamwarden.warden.launcher import read_launch_record, start_stream_detached

from .baseline import consume_ranges
from .measure import PeakRss, Sampler, group, percentiles, tree
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
        log = self.settings.run_paths.logs / f"stream-{len(self.launches)}.log"
        self.launches.append(log)
        self.launched_at = time.time()
        start_stream_detached(self.settings, log)
        record = read_launch_record(self.settings)
        assert record is not None
        self.pgid = record.pid
        return self

    def commits(self) -> list[Commit]:
        """The batch commits of ``session_rows`` so far, oldest first."""
        return batch_commits(self.settings.root("output") / SESSION_ROWS)

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
        """SIGKILL the process group and every descendant; returns when it was sent (epoch seconds). A job
        never launched has no group (``pgid`` 0 would name the caller's own): nothing is sent."""
        killed = time.time()
        if not self.pgid:
            return killed
        members = self.processes()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pgid, signal.SIGKILL)
        for process in members:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        psutil.wait_procs(members, timeout=30)
        return killed

    def stop(self, timeout: float = 180) -> None:
        """Drain through the stop marker; SIGKILL what is left after ``timeout`` (nothing for a job never
        launched)."""
        if not self.pgid:
            return
        self.settings.run_paths.stop_marker.touch()
        with contextlib.suppress(psutil.NoSuchProcess, psutil.TimeoutExpired):
            psutil.Process(self.pgid).wait(timeout)
        self.kill9()


@dataclass(frozen=True)
class Commit:
    """One Delta commit of a micro-batch, as the table's history records it."""

    version: int
    batch_id: int
    committed_at: float  # epoch seconds: the commit's timestamp
    ranges: OffsetRanges  # the batch's planned offsets
    covers: IntervalIndex  # the offsets it made visible: planned minus what earlier commits held

    @property
    def records(self) -> int:
        return sum(end - start for parts in self.covers.values() for runs in parts.values() for start, end in runs)


def batch_commits(table_root: Path) -> list[Commit]:
    """The commits of micro-batches in the Delta table at ``table_root``, oldest first (none before it exists).

    Other commits (the table's creation, maintenance) carry no ``streamwarden.batch_id`` and are left out.
    """
    location = TableLocation(table_root.name, table_root, {})
    if not location.exists():
        return []
    commits: list[Commit] = []
    held: IntervalIndex = {}
    for info in sorted(location.open().history(), key=lambda i: int(i["version"])):
        if "streamwarden.batch_id" not in info:
            continue
        ranges = canonical_ranges(json.loads(info[RANGES_KEY]))
        covers = uncommitted(ranges, held)
        for topic, parts in covers.items():
            for partition, runs in parts.items():
                before = held.setdefault(topic, {}).get(partition, [])
                held[topic][partition] = merge_intervals([*before, *runs])
        commits.append(Commit(int(info["version"]), int(info["streamwarden.batch_id"]), info["timestamp"] / 1000,
                              ranges, covers))
    return commits


def mean_durations(beats: list[Heartbeat]) -> dict[str, int]:
    """Spark's split of a batch's time (``durationMs``), averaged over ``beats``, in ms."""
    totals: dict[str, float] = {}
    for beat in beats:
        for name, ms in beat.durations_ms.items():
            totals[name] = totals.get(name, 0) + ms
    return {name: round(total / len(beats)) for name, total in sorted(totals.items())}


def warm_up_batches(rows: list[int]) -> int:
    """How many of a cold start's first data batches (their input ``rows``, in order) are warm-up, not steady.

    The first always is. When the job limited it (``kafka_source.FIRST_BATCH_RECORDS``), the first batch of full
    size after it still runs on cold workers and state stores: it is warm-up too, if a batch follows it."""
    if len(rows) > 2 and rows[0] < max(rows[1:]):
        return 2
    return min(1, len(rows))


def throughput(beats: list[Heartbeat], commits: list[Commit]) -> dict[str, Any]:
    """Steady state: every data batch after the warm-up ones (heartbeat), and commit to commit (Delta commits)."""
    steady = beats[warm_up_batches([b.num_input_rows for b in beats]):]
    rows = sum(b.num_input_rows for b in steady)
    busy = sum(b.batch_duration_ms or 0 for b in steady) / 1000
    result: dict[str, Any] = {
        "batches": len(beats), "steady_batches": len(steady), "records": sum(b.num_input_rows for b in beats),
        "msg_per_s": round(rows / busy, 1) if busy else None,
        "first_batch": {"rows": beats[0].num_input_rows, "duration_s": (beats[0].batch_duration_ms or 0) / 1000}
        if beats else None,
    }
    if len(commits) > 1 and commits[-1].committed_at > commits[0].committed_at:
        span = commits[-1].committed_at - commits[0].committed_at
        result["commit_to_commit_msg_per_s"] = round(sum(c.records for c in commits[1:]) / span, 1)
    result["durations_ms_per_batch"] = mean_durations(steady)
    result["state"] = steady[-1].state if steady else []
    return result


def run_throughput(workload: Workload, home: Path, max_offsets: int, trigger: str,
                   timeout: float) -> tuple[StreamJob, dict[str, Any]]:
    """Cold start on the whole backlog until every offset is committed; the job keeps running."""
    job = StreamJob(stream_settings(workload, home, max_offsets, trigger))
    with HeartbeatLog(job.settings.run_paths.heartbeat) as beats, PeakRss(job.processes) as rss:
        job.start()
        try:
            job.wait_until(lambda: job.caught_up(workload.ends), timeout, "catch-up on the backlog")
            last = commit_batches(job.settings.checkpoint_location)[-1]  # its progress event follows the commit
            with contextlib.suppress(TimeoutError):
                job.wait_until(lambda: any(b.batch_id == last for b in beats.batches.values()), 10, "last heartbeat")
        except BaseException:
            job.kill9()
            raise
    commits = job.commits()
    result = throughput(beats.data_batches(), commits)
    result.update(cold_start_s=round(commits[0].committed_at - job.launched_at, 2), peak_rss_mib=rss.peak_mib,
                  peak_pss_mib=rss.peak_pss_mib, delta_commit_ms=commit_times(job.settings.run_paths.logs))
    return job, result


_COMMIT_LINE = re.compile(
    r"committed to (?P<table>\w+) as version \d+: \d+ rows in \d+ files \(commit (?P<ms>\d+) ms\)")


def commit_times(logs: Path) -> dict[str, dict[str, Any]]:
    """Per table, how long the driver's Delta commit of a batch took (listing, footers, commit), from the
    stream's own log lines."""
    found: dict[str, list[float]] = {}
    for log in log_files(logs, PYTHON_LOG):
        for match in _COMMIT_LINE.finditer(log.read_text(errors="replace")):
            found.setdefault(match["table"], []).append(float(match["ms"]))
    return {table: {"commits": len(ms), **percentiles(np.array(ms)), "max": max(ms)} for table, ms in found.items()}


def latency(bootstrap: str, starts: Ends, ends: Ends, commits: list[Commit], until: float) -> dict[str, Any]:
    """Kafka timestamp -> time of the Delta commit that made it visible, of every record committed before ``until``.

    ``until`` and the commit times are epoch seconds.
    """
    stamps: dict[tuple[str, int], np.ndarray] = {}
    for topic, parts in ends.items():
        for partition, end in parts.items():
            stamps[(topic, partition)] = np.zeros(end - starts.get(topic, {}).get(partition, 0), np.int64)
    for messages in consume_ranges(bootstrap, starts, ends):
        for m in messages:
            topic, partition, offset = str(m.topic()), int(m.partition() or 0), int(m.offset() or 0)
            stamps[(topic, partition)][offset - starts.get(topic, {}).get(partition, 0)] = m.timestamp()[1]
    samples = []
    for commit in commits:
        if commit.committed_at >= until:
            continue
        for topic, covered in commit.covers.items():
            for partition, runs in covered.items():
                base = starts.get(topic, {}).get(partition, 0)
                for start, end in runs:
                    if end <= base:  # committed before the measured span
                        continue
                    sent = stamps[(topic, partition)][max(start, base) - base:end - base]
                    samples.append(commit.committed_at - sent / 1000)
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
    job.wait_until(lambda: any(c.committed_at > killed for c in job.commits()), timeout,
                   "a batch committed after the restart")
    first_after = min(c.committed_at for c in job.commits() if c.committed_at > killed)
    producer.join()
    ends = log_ends(workload.bootstrap, workload.spec.pattern)
    job.wait_until(lambda: job.caught_up(ends), timeout, "catch-up after the restart")
    result = {"target_rate": round(rate, 1), "produced_rate": reports[0].rate,
              **latency(workload.bootstrap, workload.ends, ends, job.commits(), killed)}
    return {"latency_s": result, "restart_s": round(first_after - killed, 2)}, ends, reports[0].expected_tables


def run_fixed_cost(job: StreamJob, workload: Workload, rate: float, seconds: float,
                   timeout: float) -> tuple[dict[str, Any], Ends, dict[str, Any]]:
    """The fixed cost per batch: a trickle of ``rate`` msg/s for ``seconds`` (a few hundred records a batch),
    every batch's duration from the heartbeat, and Spark's split of it (averages over those batches).

    Returns the figures, the new log ends and the expected tables of the new sessions."""
    settings = workload.settings()
    options = workload.spec.options(rate=rate, duration=seconds, max_messages=0, seed=workload.spec.seed + 2)
    with HeartbeatLog(job.settings.run_paths.heartbeat) as beats:
        report = produce(settings, options)
        ends = log_ends(workload.bootstrap, workload.spec.pattern)
        job.wait_until(lambda: job.caught_up(ends), timeout, "catch-up on the trickle")
        time.sleep(1)  # the last batch's progress event follows its commit
    small = beats.data_batches()[1:]  # the first may still carry what the previous phase left
    query_ms = offsets_query_ms(workload)
    seconds_each = np.array([(b.batch_duration_ms or 0) / 1000 for b in small])
    result: dict[str, Any] = {"target_rate": rate, "produced_rate": report.rate, "batches": len(small),
              "records_p50": float(np.median([b.num_input_rows for b in small])) if small else None,
              "duration_s": {**percentiles(seconds_each), "max": round(float(seconds_each.max()), 3)} if small else {},
              "durations_ms_per_batch": mean_durations(small),
              **{f"offsets_query_{way}_ms": {k: round(v, 1) for k, v in percentiles(np.array(ms)).items()}
                 for way, ms in query_ms.items()}}
    return result, ends, report.expected_tables or {}


def offsets_query_ms(workload: Workload, repeats: int = 5) -> dict[str, list[float]]:
    """How long the broker takes to answer the Python source's query at a trigger (list the topics, then the
    partitions' watermarks from fetches: :meth:`KafkaStreamReader.latestOffset`), ms, ``repeats`` times, after
    the trickle (nothing new arrives meanwhile):

    * ``listed``: every partition listed (ListOffsets earliest and latest), then fetched just before its
      listed end, as at the first trigger after a start;
    * ``known_ends``: every partition fetched at the end the previous query found, as at every later
      trigger. With nothing new this is its cheapest case: a partition with new records costs the broker
      what one fetch below the end costs.

    Tansu's in-memory storage answers a ListOffsets, or a fetch below the end, in a time that grows with the
    record batches a partition holds, so after the run's millions of records this is part of what the
    trickle's ``latestOffset`` measures."""
    consumer = metadata_consumer({"bootstrap.servers": workload.bootstrap})
    try:
        known: dict[TopicPartitionId, int] = {}
        fetch_high_watermarks(consumer, list_partitions(consumer, workload.spec.pattern), known=known)
        took: dict[str, list[float]] = {"listed": [], "known_ends": []}
        for _ in range(repeats):
            for way, memo in (("listed", None), ("known_ends", known)):
                started = time.perf_counter()
                fetch_high_watermarks(consumer, list_partitions(consumer, workload.spec.pattern), known=memo)
                took[way].append((time.perf_counter() - started) * 1000)
        return took
    finally:
        consumer.close()
