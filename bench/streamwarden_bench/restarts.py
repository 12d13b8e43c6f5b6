"""Session restarts benchmark: every micro-batch's duration while 50 sites restart their sessions, jittered and at once.

The issue ("restart_sessions") asks: restarting 50 sites at once with jitter does not push any batch past
3x the trigger interval. One run, one stream (``spark-submit jobs/stream.py`` as the warden starts it, the
session pipeline, default settings but the trigger) on ``sites`` fresh site topics, fed by the demo
producer at a steady ``rate`` and obeying the control topic:

1. **settle**: the stream starts on the producer's first snapshots; ``settle_s`` (and 3 batches) after its
   first data batch the backlog is gone (not measured);
2. **baseline**: ``baseline_s`` (and at least 3 batches) of steady traffic, no restart;
3. **jittered**: a ``restart_sessions`` plan for every site (``streamwarden.session_restarts.plan.make_plan``, sent
   with ``streamwarden.session_restarts.steps.send`` on the control topic) spread over ``jitter``; measured until
   every site's new sessions are in ``session_rows``;
4. **between**: ``settle_s`` (and 3 batches) without restarts, measured too: how far the steady state moved
   since the baseline (the Delta commits slow down as the log grows, other users' load changes);
5. **at once**: the same restart with jitter 0.

Each batch's duration is Spark's ``batchDuration`` as the stream's heartbeat (its
``StreamingQueryListener``) reports it on every progress event, sampled every 0.2 s
(:class:`~streamwarden_bench.stream.HeartbeatLog`; batches last over a second, so none is missed, and the
batch ids are checked for gaps); the rows each batch committed to ``session_rows`` come from the stream's
Python log (``run/logs/stream.python.log`` and its rolled-over files: ``batch N committed to session_rows
...``). A phase's batches are those whose trigger fired in it: baseline from its start to the first
restart, a restart from its plan's creation to the batch whose commit made the last site's answer visible.
The answers are looked for while the stream runs in the files each Delta commit adds
(:func:`streamwarden.session_restarts.sessions.find_answers` over the new files only, so the look stays cheap
beside the stream); at the end, once more over the whole table.

Afterwards the producer stops, the stream catches up and drains, and the output is verified like every
engine's (:func:`streamwarden_bench.verify.verify_streamwarden`): each offset exactly once, each open
session's table as the producer meant, nothing in quarantine.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow.dataset as ds  # type: ignore[import-untyped, unused-ignore]
from deltalake import DeltaTable

from streamwarden.control.channel import ensure_control_topic
from streamwarden.local.producer import ProducerReport
from streamwarden.logs.bounds import PYTHON_LOG, log_files
from streamwarden.runfiles.heartbeat import Heartbeat
from streamwarden.session_restarts.plan import RestartPlan, make_plan, stream_sites
from streamwarden.session_restarts.request import RestartRequest
from streamwarden.session_restarts.sessions import Answer, find_answers
from streamwarden.session_restarts.settings import RestartSettings
from streamwarden.session_restarts.steps import look, send
from streamwarden.settings import Settings, load_settings
from streamwarden.tables.location import SESSION_ROWS, TableLocation

from .measure import PeakRss, percentiles
from .stream import Commit, HeartbeatLog, StreamJob
from .verify import verify_streamwarden
from .workload import WorkloadSpec, log_ends, produce

LIMIT_X_TRIGGER = 3.0
"""The issue's bound: no batch of the jittered restart longer than this many trigger intervals."""
DEFAULT_JITTER = float(RestartSettings.model_fields["jitter"].default)
"""``STREAMWARDEN_SESSION_RESTART_JITTER``'s default (300 s): what a scheduled run spreads the sites over."""
_COMMIT_LINE = re.compile(r"batch (?P<batch>\d+) committed to (?P<table>\w+) as version \d+: (?P<rows>\d+) rows "
                          r"in \d+ files \(commit (?P<ms>\d+) ms\)")


def default_jitter(sites: int, trigger_s: float) -> float:
    """The jitter a scheduled run uses (300 s), widened to one trigger interval per site when that is more.

    The plan spaces the sites ``jitter / sites`` apart; at one trigger interval or more apart no two sites'
    snapshots share a micro-batch (50 sites at the default 5 s trigger: 250 s, so the 300 s default holds).
    """
    return max(DEFAULT_JITTER, sites * trigger_s)


@dataclass(frozen=True)
class RestartBenchSpec:
    """The run's sizes: sites, traffic, snapshots, the trigger and how long each quiet phase lasts."""

    sites: int = 50
    partitions: int = 1  # per site topic
    sessions_per_site: int = 10
    rows_per_snapshot: int = 200
    rate: float = 250.0  # messages/s over all sites, updates and deletes between the snapshots
    trigger: str = "5s"
    jitter: float | None = None  # None: default_jitter(sites, trigger)
    settle_s: float = 60.0
    baseline_s: float = 60.0
    deadline_s: float = float(RestartSettings.model_fields["deadline"].default)
    seed: int = 7
    timeout: float = 3600.0

    def workload(self, prefix: str) -> WorkloadSpec:
        """The producer's sessions as a workload (no message limit: it runs until stopped)."""
        return WorkloadSpec(prefix=prefix, topics=self.sites, partitions=self.partitions,
                            sessions=self.sites * self.sessions_per_site, rows=self.rows_per_snapshot,
                            updates_per_session=1_000_000_000, messages=0, seed=self.seed)


@dataclass(frozen=True)
class Batch:
    """One micro-batch as the heartbeat and the stream's log report it."""

    batch_id: int
    started_at: float  # epoch seconds: when its trigger fired (the progress timestamp)
    duration_s: float  # Spark's batchDuration
    records: int  # Kafka records read
    session_rows: int  # rows committed to session_rows (0 when the batch wrote none)
    add_batch_s: float  # of the duration: the foreachBatch write and commits
    latest_offset_s: float  # of the duration: the source finding the topics' ends
    delta_commit_s: float  # of add_batch_s: the driver's Delta commits of both tables

    @classmethod
    def of(cls, beat: Heartbeat, logged: dict[int, BatchLog]) -> Batch:
        """The batch of a progress heartbeat, with what the log says of it."""
        assert beat.batch_id is not None and beat.progress_timestamp is not None
        started = datetime.fromisoformat(beat.progress_timestamp).timestamp()
        log = logged.get(beat.batch_id, BatchLog())
        ms = beat.durations_ms
        return cls(beat.batch_id, round(started, 3), (beat.batch_duration_ms or 0) / 1000, beat.num_input_rows,
                   log.session_rows, ms.get("addBatch", 0) / 1000, ms.get("latestOffset", 0) / 1000,
                   round(log.commit_ms / 1000, 3))


@dataclass
class BatchLog:
    """What the stream's log says of one batch: rows committed to ``session_rows``, Delta commit time."""

    session_rows: int = 0
    commit_ms: float = 0.0


@dataclass
class Restart:
    """One restart sent: its plan, and per request the batch and commit time that made its answer visible."""

    name: str
    jitter_s: float
    plan: RestartPlan
    load_average: tuple[float, ...]
    answers: dict[str, Answer] = field(default_factory=dict)
    visible: dict[str, tuple[int, float]] = field(default_factory=dict)  # request id -> (batch id, commit epoch)

    @property
    def issued_at(self) -> float:
        """When the plan was made (epoch seconds): the first site's turn."""
        return self.plan.created_at.timestamp()

    @property
    def last_turn_at(self) -> float:
        """The last site's turn (epoch seconds)."""
        return max(t.not_before for t in self.plan.turns).timestamp()

    def last_answer(self) -> tuple[int, float] | None:
        """(batch id, commit time) of the last answer made visible; None unless every site answered."""
        if len(self.visible) < len(self.plan.turns):
            return None
        return max(self.visible.values(), key=lambda found: found[1])


@dataclass(frozen=True)
class PhaseFigures:
    """One phase's batches: durations against the trigger and the baseline, sizes, and the restart's answers."""

    name: str
    batches: int
    first_batch: int | None
    last_batch: int | None
    load_average: tuple[float, ...]
    max_s: float | None
    p50_s: float | None
    p95_s: float | None
    max_x_trigger: float | None
    p95_x_trigger: float | None
    max_x_baseline: float | None
    p95_x_baseline: float | None
    largest_records: int
    largest_session_rows: int
    latest_offset_p50_s: float | None  # the source's share of a batch (grows with the topic-partitions)
    delta_commit_p50_s: float | None  # the Delta commits' share (grows with the versions since a log checkpoint)
    jitter_s: float | None = None
    sites: int | None = None
    answered: int | None = None
    sessions_opened: int | None = None
    producer_restarts: int | None = None
    all_answered_s: float | None = None  # plan created -> commit of the last answer
    after_last_turn_s: float | None = None  # the last site's turn -> commit of the last answer
    max_within_3x_trigger: bool | None = None


@dataclass
class RestartBenchResult:
    """The run: sizes, phases, every batch, the producer's restarts, the output's verification."""

    spec: dict[str, Any]
    trigger_s: float
    jitter_s: float
    phases: list[PhaseFigures]
    batches: list[dict[str, Any]]
    missed_batches: list[int]
    producer: dict[str, Any]
    verification: dict[str, Any]
    peak_rss_mib: float
    load_average_at_start: list[float]
    elapsed_s: float

    def phase(self, name: str) -> PhaseFigures:
        """The figures of the phase ``name``."""
        return next(p for p in self.phases if p.name == name)

    @property
    def verdict(self) -> bool | None:
        """The issue's figure: the jittered restart's longest batch within 3x the trigger interval."""
        return self.phase("jittered").max_within_3x_trigger

    def to_json(self) -> dict[str, Any]:
        """The results document's ``restarts`` section."""
        return {**asdict(self), "verdict_jittered_max_within_3x_trigger": self.verdict}


class AnswerWatch:
    """Looks for a plan's answers in the files of ``session_rows`` committed since the previous look.

    The table stays open and is brought up to date incrementally; only the new files are read, by their local
    paths (the benchmark writes under its own work folder). A look costs ~0.15 s of CPU at 60 versions of 50
    sites, against ~0.5 s for a dataset of the whole table.
    """

    def __init__(self, settings: Settings, plan: RestartPlan) -> None:
        self.location = TableLocation.of(settings, SESSION_ROWS)
        self.request_ids = [t.request_id for t in plan.turns]
        self.table: DeltaTable | None = None
        self.seen: set[str] = set()
        self.answered: set[str] = set()

    def look(self) -> int:
        """Reads the new files; returns how many requests have an answer so far."""
        if self.table is None:
            self.table = self.location.open_or_none()
        else:
            self.table.update_incremental()
        new = [uri for uri in self.table.file_uris() if uri not in self.seen] if self.table is not None else []
        if new:
            self.seen.update(new)
            with duckdb.connect() as con:
                self.answered.update(find_answers(con, ds.dataset(new, format="parquet"), self.request_ids))
        return len(self.answered)


def read_batch_logs(logs: Sequence[Path]) -> dict[int, BatchLog]:
    """Per batch id, the rows it committed to ``session_rows`` and its Delta commits' time, from the stream's
    log lines (``batch N committed to <table> as version V: R rows in F files (commit M ms)``)."""
    found: dict[int, BatchLog] = {}
    for log in logs:
        text = log.read_text(errors="replace") if log.exists() else ""
        for m in _COMMIT_LINE.finditer(text):
            entry = found.setdefault(int(m["batch"]), BatchLog())
            entry.commit_ms += float(m["ms"])
            if m["table"] == SESSION_ROWS:
                entry.session_rows += int(m["rows"])
    return found


def _commit_of(commits: Sequence[Commit], answer: Answer) -> Commit | None:
    """The batch commit that made ``answer``'s first row visible."""
    for commit in commits:
        for start, end in commit.covers.get(answer.site, {}).get(answer.partition, []):
            if start <= answer.offset < end:
                return commit
    return None


def _ratio(value: float | None, by: float | None) -> float | None:
    """``value / by`` to three places; None when either is missing."""
    return round(value / by, 3) if value is not None and by else None


def summarize(name: str, batches: Sequence[Batch], trigger_s: float, *, load_average: tuple[float, ...],
              baseline: PhaseFigures | None = None, restart: Restart | None = None,
              producer_restarts: int | None = None) -> PhaseFigures:
    """The figures of one phase's batches (and of its restart, when it is one)."""
    durations = np.array([b.duration_s for b in batches])
    spread = percentiles(durations, (50, 95))
    worst = round(float(durations.max()), 3) if len(durations) else None
    p50, p95 = spread.get("p50"), spread.get("p95")
    figures: dict[str, Any] = {
        "name": name, "batches": len(batches), "first_batch": batches[0].batch_id if batches else None,
        "last_batch": batches[-1].batch_id if batches else None, "load_average": load_average,
        "max_s": worst, "p50_s": p50, "p95_s": p95,
        "max_x_trigger": _ratio(worst, trigger_s), "p95_x_trigger": _ratio(p95, trigger_s),
        "max_x_baseline": _ratio(worst, baseline.max_s if baseline else None),
        "p95_x_baseline": _ratio(p95, baseline.p95_s if baseline else None),
        "largest_records": max((b.records for b in batches), default=0),
        "largest_session_rows": max((b.session_rows for b in batches), default=0),
        "latest_offset_p50_s": percentiles(np.array([b.latest_offset_s for b in batches]), (50,)).get("p50"),
        "delta_commit_p50_s": percentiles(np.array([b.delta_commit_s for b in batches]), (50,)).get("p50"),
    }
    if restart is not None:
        last = restart.last_answer()
        figures.update(
            jitter_s=restart.jitter_s, sites=len(restart.plan.turns), answered=len(restart.answers),
            sessions_opened=sum(a.sessions for a in restart.answers.values()), producer_restarts=producer_restarts,
            all_answered_s=round(last[1] - restart.issued_at, 2) if last else None,
            after_last_turn_s=round(last[1] - restart.last_turn_at, 2) if last else None,
            max_within_3x_trigger=worst <= LIMIT_X_TRIGGER * trigger_s if worst is not None else None)
    return PhaseFigures(**figures)


class RestartBench:
    """One run of the benchmark on a broker: the producer, the stream, the phases, the figures."""

    def __init__(self, spec: RestartBenchSpec, bootstrap: str, work: Path, say: Callable[[str], None]) -> None:
        self.spec = spec
        self.say = say
        self.prefix = f"rs{os.getpid():x}x{time.time_ns() // 1_000_000 % 100_000}"
        self.workload = spec.workload(self.prefix)
        self.settings = load_settings(home=work, bootstrap_servers=bootstrap, topic_pattern=self.workload.pattern,
                                      control_topic=f"{self.prefix}.control", pipeline="sessions",
                                      trigger_interval=spec.trigger)
        self.trigger_s = self.settings.trigger_interval
        self.jitter_s = spec.jitter if spec.jitter is not None else default_jitter(spec.sites, self.trigger_s)
        self.job = StreamJob(self.settings)
        self.beats = HeartbeatLog(self.settings.run_paths.heartbeat)
        self.stop_producer = threading.Event()
        self.reports: list[ProducerReport] = []
        self.failures: list[BaseException] = []
        self.settle_load: tuple[float, ...] = ()

    def _produce(self) -> None:
        """The producer thread: steady traffic until stopped, obeying the control topic."""
        options = self.workload.options(rate=self.spec.rate, max_messages=0, progress_interval=60.0)
        try:
            self.reports.append(produce(self.settings, options, self.stop_producer))
        except BaseException as exc:  # re-raised by the main thread at its next wait
            self.failures.append(exc)
            raise

    def wait(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        """Wait for ``condition`` while the producer runs, and the stream once launched (either failing ends it)."""
        def met() -> bool:
            if self.failures:
                raise RuntimeError(f"the producer failed while waiting for {what}") from self.failures[0]
            return condition()
        if self.job.pgid:
            self.job.wait_until(met, timeout, what)
            return
        deadline = time.monotonic() + timeout
        while not met():
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {what} after {timeout:.0f}s")
            time.sleep(0.2)

    def progress(self) -> list[Heartbeat]:
        """The progress event of every batch seen so far, in batch order."""
        return sorted(list(self.beats.batches.values()), key=lambda b: b.batch_id or 0)

    def settled(self, seconds: float, batches: int = 3) -> Callable[[], bool]:
        """True once ``seconds`` have passed from now and at least ``batches`` batches triggered since then ended."""
        since = time.time()
        return lambda: time.time() >= since + seconds and sum(
            datetime.fromisoformat(b.progress_timestamp or b.written_at).timestamp() >= since
            for b in self.progress()) >= batches

    def restart(self, name: str, jitter: float) -> Restart:
        """Send a restart of every site over ``jitter`` seconds; return once every site's answer is committed."""
        sites = stream_sites(self.settings)
        request = RestartRequest((), None, f"benchmark: {name} restart", jitter, self.spec.deadline_s)
        load = tuple(round(v, 2) for v in os.getloadavg())
        plan = make_plan(request, sites, run_key=f"{self.prefix}-{name}", now=datetime.now(UTC))
        send(self.settings, plan)
        self.say(f"[restarts] {name}: {len(sites)} sites over {jitter:g} s (load {load[0]})")
        watch = AnswerWatch(self.settings, plan)
        last = [0]

        def all_answered() -> bool:
            found = watch.look()
            if found != last[0]:
                last[0] = found
                self.say(f"[restarts] {name}: {found}/{len(sites)} sites answered")
            time.sleep(max(0.0, self.trigger_s - 0.2))  # look about once a trigger interval
            return found == len(sites)

        self.wait(all_answered, jitter + self.spec.deadline_s, f"every site's answer to the {name} restart")
        return Restart(name, jitter, plan, load)

    def run(self) -> RestartBenchResult:
        """The phases in order; then the producer stops, the stream catches up and stops, the output is verified."""
        spec, settings = self.spec, self.settings
        started, load = time.monotonic(), [round(v, 2) for v in os.getloadavg()]
        ensure_control_topic(settings)  # before the producer subscribes to it
        producer = threading.Thread(target=self._produce, name="restart-bench-producer", daemon=True)
        producer.start()
        self.say(f"[restarts] {spec.sites} sites x {spec.sessions_per_site} sessions x {spec.rows_per_snapshot} "
                 f"rows per snapshot at {spec.rate:g} msg/s, trigger {self.trigger_s:g} s, jitter {self.jitter_s:g} s")
        with self.beats, PeakRss(self.job.processes) as rss:
            try:
                self.wait(lambda: len(stream_sites(settings)) == spec.sites, 120, "the site topics")
                self.job.start()
                self.wait(lambda: any(b.num_input_rows for b in self.progress()), spec.timeout,
                          "the first data batch")
                self.wait(self.settled(spec.settle_s), spec.settle_s + spec.timeout, "the stream to settle")
                self.say(f"[restarts] baseline: {spec.baseline_s:g} s")
                baseline = (time.time(), tuple(round(v, 2) for v in os.getloadavg()))
                self.wait(self.settled(spec.baseline_s), spec.baseline_s + spec.timeout, "the baseline's batches")
                restarts = [self.restart("jittered", self.jitter_s)]
                self.settle_load = tuple(round(v, 2) for v in os.getloadavg())
                self.wait(self.settled(spec.settle_s), spec.settle_s + spec.timeout,
                          "the stream to settle after the jittered restart")
                restarts.append(self.restart("at_once", 0.0))
                self.stop_producer.set()
                producer.join(120)
                if self.failures or not self.reports:
                    raise RuntimeError("the producer did not finish") from (self.failures[0] if self.failures else None)
                ends = log_ends(settings.bootstrap_servers, self.workload.pattern)
                self.wait(lambda: self.job.caught_up(ends), spec.timeout, "catch-up on every offset")
            except BaseException:
                self.stop_producer.set()
                self.job.kill9()
                raise
            finally:
                with contextlib.suppress(Exception):
                    self.job.stop()
        report = self.reports[0]
        assert report.expected_tables is not None
        phases, batches, missed = self.phases(restarts, report, baseline)
        return RestartBenchResult(
            spec=asdict(spec), trigger_s=self.trigger_s, jitter_s=self.jitter_s, phases=phases,
            batches=[asdict(b) for b in batches], missed_batches=missed,
            producer={"messages": report.messages_sent, "rate": report.rate, "restarts": len(report.restarts),
                      "sessions_started": report.sessions_started, "sessions_ended": report.sessions_ended},
            verification=verify_streamwarden(settings.root("output"), ends, report.expected_tables).to_json(),
            peak_rss_mib=rss.peak_mib, load_average_at_start=load, elapsed_s=round(time.monotonic() - started, 1))

    def phases(self, restarts: list[Restart], report: ProducerReport, baseline: tuple[float, tuple[float, ...]]
               ) -> tuple[list[PhaseFigures], list[Batch], list[int]]:
        """Each phase's figures, every batch, and the batch ids the heartbeat missed.

        The answers are read once more from the whole table and mapped to the batch commits that made them
        visible; ``baseline`` is when the steady phase began and the load average then.
        """
        logged = read_batch_logs(log_files(self.job.settings.run_paths.logs, PYTHON_LOG))
        batches = [Batch.of(b, logged) for b in self.progress()]
        ids = [b.batch_id for b in batches]
        missed = sorted(set(range(ids[0], ids[-1] + 1)) - set(ids)) if ids else []
        commits = self.job.commits()
        steady = summarize("baseline", [b for b in batches if baseline[0] <= b.started_at < restarts[0].issued_at],
                           self.trigger_s, load_average=baseline[1])
        phases = [steady]
        for restart in restarts:
            restart.answers = look(self.settings, restart.plan)
            for request_id, answer in restart.answers.items():
                commit = _commit_of(commits, answer)
                if commit is not None:
                    restart.visible[request_id] = (commit.batch_id, commit.committed_at)
            last = restart.last_answer()
            within = [b for b in batches
                      if b.started_at >= restart.issued_at and (last is None or b.batch_id <= last[0])]
            asked = {t.request_id for t in restart.plan.turns}
            phases.append(summarize(restart.name, within, self.trigger_s, load_average=restart.load_average,
                                    baseline=steady, restart=restart,
                                    producer_restarts=sum(r.get("request_id") in asked for r in report.restarts)))
        jittered, at_once = phases[1], restarts[1]
        if jittered.last_batch is not None:  # the quiet spell between the restarts: has the steady state moved?
            between = [b for b in batches if jittered.last_batch < b.batch_id and b.started_at < at_once.issued_at]
            phases.insert(2, summarize("between", between, self.trigger_s, load_average=self.settle_load,
                                       baseline=steady))
        return phases, batches, missed


def run_restart_bench(spec: RestartBenchSpec, bootstrap: str, work: Path,
                      say: Callable[[str], None] = print) -> RestartBenchResult:
    """Run the benchmark with ``spec`` on the broker at ``bootstrap``; scratch files under ``work``."""
    work.mkdir(parents=True, exist_ok=True)
    return RestartBench(spec, bootstrap, work, say).run()
