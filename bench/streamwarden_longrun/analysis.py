"""What a long run's samples say: memory slopes per role after the warm-up, disk slopes, the time left before a
bound, stream deaths, red DAG runs, batch gaps, processes left behind, and the verdict.

A slope is a least-squares line through the samples after the warm-up (the JVM grows its heap, Airflow parses
its DAGs and the first tasks import their modules in the first minutes), in MiB per hour. A role is *flat*
when its memory grows by no more than the threshold (``--flat-mib-per-hour``, 10 by default: a day at that
rate is 240 MiB, and all of the fifteen roles at that rate would take under 4 GiB of the machine's 24 a day);
shrinking is flat too. The embedded broker is the exception: Tansu's memory storage keeps every record it is sent
(no retention), so it grows with the demo's traffic by design; it is judged by the time to `up`'s
``--broker-memory-limit`` (where `up` stops the demo producer) instead, which must be a day or more.

What is fitted is the RSS of the role's long-lived processes (running for 5 minutes or more,
:data:`~streamwarden_longrun.census.LONG_LIVED_S`): a leak that takes hours lives in a process that lives for
hours, and the role's short-lived processes (a DAG file's parse, a PySpark worker's fork) come and go between
samples, hundreds of MiB at a time. When the long-lived processes change (the stream restarted, a worker
replaced), the fit starts a new segment with an offset of its own: a restart's step is not growth. A role with no
long-lived process in most samples (a task) is fitted on the highest RSS it had at any look of each interval
instead. Tasks, though, are of different kinds: a health check holds ~230 MiB, a validation ~900, and which
interval held a validation says nothing about growth (a spike a half hour after the window's middle alone
tilts the line by ~19 MiB/h). So where the run named its tasks (each task process's peak, with what the API
said it was), ``airflow-tasks`` is judged per kind instead: each DAG task's peak over its runs after the warm-up
(at least three), the role flat when every kind is, its slope the steepest kind's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from datetime import datetime
from itertools import pairwise
from typing import Any

import numpy as np

from streamwarden.local.broker_memory import default_limit

from .records import MIB, EventType, RoleMemory, RunLog, Sample
from .roles import EXPECTED_ROLES, ROLE_NAMES

MIN_JUDGED_MINUTES = 5.0
"""A fit over a shorter window says nothing about a slope: memory is not judged."""
INDICATIVE_MINUTES = 60.0
"""Below this, slopes are stated as indicative (a JVM's heap and Airflow's caches may still be settling)."""
TRANSIENT_COVERAGE = 0.5
TARGET_HOURS = 24.0
"""Issue 37: `make run` runs for 24 hours on this machine."""
LONG_LIVED = "long-lived RSS"
LARGEST_PROCESS = "largest process's peak"
TASK_KINDS = "each task's peak, per DAG task"
TASKS = "airflow-tasks"
MIN_TASK_RUNS = 3
BROKER = "broker"
"""The role whose memory is the records it holds: judged by the time to its limit, not as flat."""
GAPS_LISTED = 5
EDGE_SAMPLES = 5


@dataclass(frozen=True)
class RoleSummary:
    role: str
    coverage: float  # share of the window's samples in which the role had a process
    processes_max: int
    fitted_on: str  # LONG_LIVED, or LARGEST_PROCESS for a role without a long-lived process
    mib_start: float | None  # mean of the fitted values over the window's first samples
    mib_end: float | None  # ... and its last
    mib_max: float  # the highest RSS (all of the role's processes) at any look of the whole run
    pss_mib_end: float | None  # all of the role's processes, mean of the window's last samples
    slope_mib_per_hour: float | None
    flat: bool | None  # None: not judged (window too short)


@dataclass(frozen=True)
class TaskKind:
    """The peaks of one DAG task's runs (their processes) after the warm-up."""

    task: str  # dag_id.task_id
    runs: int
    first_mib: float
    last_mib: float
    max_mib: float
    slope_mib_per_hour: float | None  # None under MIN_TASK_RUNS runs
    flat: bool | None


@dataclass(frozen=True)
class AreaSummary:
    area: str
    mib_end: float
    slope_mib_per_hour: float | None


@dataclass(frozen=True)
class Projection:
    bound: str
    headroom_gib: float
    growth_mib_per_hour: float
    hours: float | None  # None: nothing grows


@dataclass(frozen=True)
class Death:
    pid: int
    at_s: float
    failure_class: str | None  # None: no failure document (killed: by the warden as hung, or by the kernel)
    message: str | None
    heartbeat_age_s: float | None  # the heartbeat's age when the process was seen gone


@dataclass(frozen=True)
class Gap:
    after_s: float  # when the commit before the gap was written, seconds after `up` started
    seconds: float
    open: bool  # no commit ended it before the platform was stopped


@dataclass(frozen=True)
class StreamSummary:
    commits: int
    starts: int
    first_commit_s: float | None
    max_gap: Gap | None
    max_gap_after_warmup: Gap | None  # the first batches catch up with what the producer wrote during the boot
    longest_gaps: list[Gap]
    deaths: list[Death]


@dataclass(frozen=True)
class Summary:
    started_at: str
    host: str
    cpus: int
    source: dict[str, Any]
    options: dict[str, Any]
    ran_min: float  # `up` started to the stop (or to the last sample of a run cut short)
    samples: int
    window_min: float
    memory_judged: bool
    roles: list[RoleSummary]
    task_kinds: list[TaskKind]
    roles_missing: list[str]
    unclassified: list[str]
    platform_rss_mib_end: float
    platform_pss_mib_end: float
    disk: list[AreaSummary]
    disk_free_gib_end: float
    projections: list[Projection]
    hours_to_first_bound: float | None
    stream: StreamSummary
    red_runs: list[dict[str, Any]]
    failed_tasks_outside_red_runs: list[dict[str, Any]]
    api_errors: list[dict[str, Any]]
    leftovers: list[dict[str, Any]]
    platform_exited: dict[str, Any] | None
    stop: dict[str, Any] | None
    sample_ms_mean: float | None
    sample_ms_max: float | None
    load_average_mean: float | None
    own_cpu_percent: float | None  # the long run's own CPU over the run, in % of one core
    verdict: str  # pass | fail | incomplete
    reasons: list[str]
    notes: list[str]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def slope_per_hour(seconds: list[float], values: list[float], segments: list[object] | None = None) -> float | None:
    """Least-squares slope of ``values`` per hour; None with under three points or no time between them.

    With ``segments`` (one key per point), a run of consecutive points with the same key is a segment with an
    offset of its own and the slope is shared (a fixed-effects fit): a restart, where the set of long-lived
    processes changes, starts a segment, so the new process's size is not taken for growth."""
    keys = segments if segments is not None else [None] * len(seconds)
    runs: list[list[int]] = []
    for index, key in enumerate(keys):
        if not runs or key != keys[index - 1]:
            runs.append([])
        runs[-1].append(index)
    hours, ys = np.array(seconds) / 3600, np.array(values, dtype=float)
    spread = covariance = 0.0
    points = 0
    for run in (run for run in runs if len(run) >= 2):
        t = hours[run] - hours[run].mean()
        spread += float((t * t).sum())
        covariance += float((t * (ys[run] - ys[run].mean())).sum())
        points += len(run)
    if points < 3 or spread <= 0:
        return None
    return round(covariance / spread, 2)


def fitted_bytes(memory: RoleMemory, fitted_on: str) -> int:
    """What a role's slope is fitted on at one sample: its long-lived processes' RSS, or for a role of short
    processes (tasks, which overlap more or less often) the largest one process held since the previous sample."""
    return memory.long_lived_rss_bytes if fitted_on == LONG_LIVED else memory.largest_rss_bytes


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 1) if values else None


def _role_summary(role: str, running: list[Sample], window: list[Sample], threshold: float,
                  judged: bool) -> RoleSummary:
    fitted = window or running
    empty = RoleMemory(0, 0, 0, 0, 0, [])
    memory = [s.roles.get(role, empty) for s in fitted]
    coverage = sum(1 for m in memory if m.processes > 0) / len(memory) if memory else 0.0
    long_lived = sum(1 for m in memory if m.long_lived_rss_bytes > 0) >= TRANSIENT_COVERAGE * len(memory)
    fitted_on = LONG_LIVED if long_lived else LARGEST_PROCESS
    values = [fitted_bytes(m, fitted_on) / MIB for m in memory]
    slope = None
    if window:
        # long-lived: only the samples that have such processes (none for 5 minutes after a restart), in segments
        kept = [i for i, m in enumerate(memory) if m.long_lived_pids or not long_lived]
        segments: list[object] = [tuple(memory[i].long_lived_pids) for i in kept]
        slope = slope_per_hour([window[i].elapsed_s for i in kept], [values[i] for i in kept], segments)
    everywhere = [s.roles[role] for s in running if role in s.roles]
    return RoleSummary(
        role=role, coverage=round(coverage, 3), processes_max=max((m.processes for m in everywhere), default=0),
        fitted_on=fitted_on,
        mib_start=_mean(values[:EDGE_SAMPLES]), mib_end=_mean(values[-EDGE_SAMPLES:]),
        mib_max=round(max((m.peak_rss_bytes / MIB for m in everywhere), default=0.0), 1),
        pss_mib_end=_mean([m.pss_bytes / MIB for m in memory[-EDGE_SAMPLES:] if m.pss_bytes is not None]),
        slope_mib_per_hour=slope, flat=(slope is None or slope <= threshold) if judged else None)


def task_kinds(log: RunLog, after_s: float, end_s: float, threshold: float | None) -> list[TaskKind]:
    """Per DAG task, the peaks of its runs started between ``after_s`` and ``end_s``, and their slope (judged
    against ``threshold`` when given); [] when the run did not name its tasks."""
    names: dict[str, str] = {}
    for event in log.of_type(EventType.TASK_NAMES):
        names.update(event.detail.get("names", {}))
    runs: dict[str, list[tuple[float, float]]] = {}
    for event in log.of_type(EventType.TASK_ENDED):
        name = names.get(str(event.detail["ti_id"]))
        started = float(event.detail["started_s"])
        if name is not None and after_s <= started <= end_s:
            runs.setdefault(name, []).append((started, event.detail["peak_rss_bytes"] / MIB))
    kinds = []
    for name, points in sorted(runs.items()):
        points.sort()
        slope = slope_per_hour([t for t, _ in points], [m for _, m in points]) \
            if len(points) >= MIN_TASK_RUNS else None
        kinds.append(TaskKind(name, len(points), round(points[0][1], 1), round(points[-1][1], 1),
                              round(max(m for _, m in points), 1), slope,
                              None if threshold is None or slope is None else slope <= threshold))
    return kinds


def _by_kinds(role: RoleSummary, kinds: list[TaskKind]) -> RoleSummary:
    """The tasks' role judged by its kinds of task, when any has enough runs."""
    judged = [k for k in kinds if k.slope_mib_per_hour is not None]
    if not judged:
        return role
    steepest = max(judged, key=lambda k: k.slope_mib_per_hour or 0.0)
    flat = None if any(k.flat is None for k in judged) else all(k.flat for k in judged)
    return replace(role, fitted_on=TASK_KINDS, slope_mib_per_hour=steepest.slope_mib_per_hour,
                   flat=flat if role.flat is not None else None)


def _gaps(log: RunLog, end_s: float) -> tuple[list[float], list[Gap]]:
    """The commits' times after `up` started (to the stop), and every gap between them, the open one included."""
    start = datetime.fromisoformat(log.info.started_at).timestamp()
    times = sorted(t - start for s in log.samples for t in s.commit_times if t - start <= end_s)
    gaps = [Gap(round(a, 1), round(b - a, 1), False) for a, b in pairwise(times)]
    if times:
        gaps.append(Gap(round(times[-1], 1), round(end_s - times[-1], 1), True))
    return times, gaps


def _deaths(log: RunLog) -> list[Death]:
    """Each stream process that ended, or wrote a failure document, while the platform was not being stopped."""
    found: dict[int, Death] = {}
    for event in log.of_type(EventType.STREAM_ENDED, EventType.STREAM_FAILURE):
        if event.detail.get("during_stop"):
            continue
        pid = int(event.detail["pid"])
        known = found.get(pid)
        found[pid] = Death(
            pid, known.at_s if known else event.elapsed_s,
            event.detail.get("failure_class") or (known.failure_class if known else None),
            event.detail.get("message") or (known.message if known else None),
            event.detail.get("heartbeat_age_s", known.heartbeat_age_s if known else None))
    return sorted(found.values(), key=lambda death: death.at_s)


def _projection(bound: str, headroom_bytes: float, slopes: list[float | None]) -> Projection:
    growth = sum(max(0.0, slope) for slope in slopes if slope is not None)
    headroom_mib = headroom_bytes / MIB
    return Projection(bound, round(headroom_mib / 1024, 2), round(growth, 2),
                      round(headroom_mib / growth, 1) if growth > 0 else None)


def summarize(log: RunLog) -> Summary:
    info = log.info
    stopping = next(log.of_type(EventType.STOPPING), None)
    end_s = stopping.elapsed_s if stopping else (log.samples[-1].elapsed_s if log.samples else 0.0)
    running = [s for s in log.samples if s.elapsed_s <= end_s]
    window = [s for s in running if s.elapsed_s >= info.warmup_minutes * 60]
    window_min = round((window[-1].elapsed_s - window[0].elapsed_s) / 60, 1) if len(window) >= 2 else 0.0
    judged = window_min >= MIN_JUDGED_MINUTES
    seen = {role for s in log.samples for role in [*s.roles, *s.roles_seen]}
    roles = [_role_summary(role, running, window, info.flat_mib_per_hour, judged)
             for role in ROLE_NAMES if role in seen]
    kinds = task_kinds(log, info.warmup_minutes * 60, end_s, info.flat_mib_per_hour if judged else None)
    roles = [_by_kinds(r, kinds) if r.role == TASKS else r for r in roles]
    last = running[-1] if running else None
    rss_end = sum(m.rss_bytes for m in last.roles.values()) if last else 0
    pss_end = sum(m.rss_bytes if m.pss_bytes is None else m.pss_bytes for m in last.roles.values()) if last else 0
    window_s = [s.elapsed_s for s in window]
    disk = [AreaSummary(area, round(last.disk_bytes.get(area, 0) / MIB, 1) if last else 0.0,
                        slope_per_hour(window_s, [s.disk_bytes.get(area, 0) / MIB for s in window]))
            for area in (last.disk_bytes if last else {})]
    projections = []
    if last and judged:
        projections = [
            _projection(f"memory: the machine's RAM ({info.machine_ram_bytes / 2**30:.0f} GiB) less the platform's "
                        "PSS now", info.machine_ram_bytes - pss_end, [r.slope_mib_per_hour for r in roles]),
            _projection("disk: free space on the home's filesystem now", last.disk_free_bytes,
                        [a.slope_mib_per_hour for a in disk])]
        broker = next((r for r in roles if r.role == BROKER and r.mib_end is not None), None)
        if broker is not None:
            limit = info.broker_memory_limit_bytes or default_limit()
            projections.append(_projection(
                f"the embedded broker's limit ({limit / 2**30:.1f} GiB, `up --broker-memory-limit`: the demo "
                "producer stops there) less its RSS now", limit - (broker.mib_end or 0.0) * MIB,
                [broker.slope_mib_per_hour]))
    first_bound = min((p.hours for p in projections if p.hours is not None), default=None)
    times, gaps = _gaps(log, end_s)
    longest = sorted(gaps, key=lambda gap: gap.seconds, reverse=True)[:GAPS_LISTED]
    warm = [gap for gap in gaps if gap.after_s >= info.warmup_minutes * 60]
    stream = StreamSummary(commits=len(times), starts=sum(1 for _ in log.of_type(EventType.STREAM_STARTED)),
                           first_commit_s=round(times[0], 1) if times else None,
                           max_gap=longest[0] if longest else None,
                           max_gap_after_warmup=max(warm, key=lambda gap: gap.seconds, default=None),
                           longest_gaps=longest, deaths=_deaths(log))
    red_runs = [e.detail | {"at_s": e.elapsed_s} for e in log.of_type(EventType.RED_RUN)]
    red_keys = {(run["dag_id"], run["run_id"]) for run in red_runs}
    failed_tasks = [e.detail | {"at_s": e.elapsed_s} for e in log.of_type(EventType.FAILED_TASK)
                    if (e.detail["dag_id"], e.detail["run_id"]) not in red_keys]
    stopped = next(log.of_type(EventType.STOPPED), None)
    killed = next(log.of_type(EventType.KILLED), None)
    exited = next(log.of_type(EventType.PLATFORM_EXITED), None)
    sample_ms = [s.sample_ms for s in log.samples]
    summary = Summary(
        started_at=info.started_at, host=info.host, cpus=info.cpus, source=info.source,
        options={"minutes": info.minutes, "interval_s": info.interval_s, "burn_cores": info.burn_cores,
                 "producer_rate": info.producer_rate, "warmup_minutes": info.warmup_minutes,
                 "flat_mib_per_hour": info.flat_mib_per_hour, "settings_given": info.settings_given},
        ran_min=round(end_s / 60, 1), samples=len(running), window_min=window_min, memory_judged=judged,
        roles=roles, task_kinds=kinds, roles_missing=[role for role in EXPECTED_ROLES if role not in seen],
        unclassified=sorted({c for s in log.samples for c in s.unclassified}),
        platform_rss_mib_end=round(rss_end / MIB, 1), platform_pss_mib_end=round(pss_end / MIB, 1),
        disk=disk, disk_free_gib_end=round(last.disk_free_bytes / 2**30, 1) if last else 0.0,
        projections=projections, hours_to_first_bound=first_bound, stream=stream,
        red_runs=red_runs, failed_tasks_outside_red_runs=failed_tasks,
        api_errors=[e.detail | {"at_s": e.elapsed_s} for e in log.of_type(EventType.API_ERROR)],
        leftovers=[e.detail for e in log.of_type(EventType.LEFTOVER)],
        platform_exited=exited.detail | {"at_s": exited.elapsed_s} if exited else None,
        stop=None if stopped is None else {**stopped.detail, "killed": killed is not None,
                                           "reason": stopping.detail.get("reason") if stopping else None},
        sample_ms_mean=_mean(sample_ms), sample_ms_max=max(sample_ms, default=None),
        load_average_mean=_mean([s.load_average[0] for s in running]),
        own_cpu_percent=round(100 * log.samples[-1].own_cpu_s / log.samples[-1].elapsed_s, 2)
        if log.samples and log.samples[-1].elapsed_s > 0 else None,
        verdict="", reasons=[], notes=[])
    verdict, reasons, notes = judge(summary, info.minutes)
    return replace(summary, verdict=verdict, reasons=reasons, notes=notes)


def judge(s: Summary, minutes: float) -> tuple[str, list[str], list[str]]:
    """``(verdict, reasons it failed, notes)``: pass, fail, or incomplete (nothing failed, but the run was cut
    short or its memory could not be judged)."""
    reasons: list[str] = []
    notes: list[str] = []
    if s.platform_exited:
        reasons.append(f"`up` exited with code {s.platform_exited['exit_code']} after "
                       f"{s.platform_exited['at_s'] / 60:.1f} min, before it was stopped")
    elif s.stop and s.stop["killed"]:
        reasons.append("`up` did not stop within the stop timeout after SIGINT: killed")
    elif s.stop and s.stop["exit_code"] != 0:
        reasons.append(f"`up` exited with code {s.stop['exit_code']} when stopped")
    if s.leftovers:
        reasons.append(f"{len(s.leftovers)} process(es) left behind after `up` stopped: "
                       + ", ".join(f"{p['pid']} ({p['role']})" for p in s.leftovers))
    if s.stream.deaths:
        reasons.append(f"{len(s.stream.deaths)} stream death(s): " + "; ".join(
            f"pid {d.pid} at {d.at_s / 60:.1f} min ({d.failure_class or 'no failure document'})"
            for d in s.stream.deaths))
    if s.red_runs:
        reasons.append(f"{len(s.red_runs)} red DAG run(s): " + ", ".join(
            f"{r['dag_id']} {r['run_id']}" for r in s.red_runs))
    if not s.stream.commits:
        reasons.append("no batch was committed")
    if s.roles_missing:
        reasons.append("roles never seen: " + ", ".join(s.roles_missing))
    growing = [r for r in s.roles if r.flat is False and r.role != BROKER]
    broker = next((r for r in s.roles if r.role == BROKER and r.flat is False), None)
    if broker is not None:
        notes.append(f"the broker grew {broker.slope_mib_per_hour:+.1f} MiB/h: the records it keeps (memory storage, "
                     "no retention), judged by the time to its limit among the bounds, not as a leak")
    if growing:
        steep = [f"{k.task} {k.slope_mib_per_hour:+.1f}" for k in s.task_kinds if k.flat is False]
        reasons.append("memory not flat (growth over " + f"{s.options['flat_mib_per_hour']:g} MiB/h): " + ", ".join(
            f"{r.role} {r.slope_mib_per_hour:+.1f} MiB/h" + (f" ({', '.join(steep)})" if r.role == TASKS and steep
                                                             else "") for r in growing))
    if s.hours_to_first_bound is not None and s.hours_to_first_bound < TARGET_HOURS:
        reasons.append(f"a bound is reached within {TARGET_HOURS:g} h: after {s.hours_to_first_bound:.1f} h")
    incomplete = []
    if s.stop is None and not s.platform_exited:
        incomplete.append("the run has no stop record (the long run itself was killed): what was sampled is reported")
    elif s.ran_min < minutes - 1 and not s.platform_exited:
        incomplete.append(f"the run was cut short: {s.ran_min:.1f} of {minutes:g} min")
    if not s.memory_judged:
        incomplete.append(f"memory not judged: {s.window_min:.1f} min of samples after the "
                          f"{s.options['warmup_minutes']:g}-minute warm-up (at least {MIN_JUDGED_MINUTES:g} needed)")
    elif s.window_min < INDICATIVE_MINUTES:
        notes.append(f"slopes fitted over {s.window_min:.0f} min only: indicative (the issue asks for 2 hours)")
    if s.failed_tasks_outside_red_runs:
        failed = s.failed_tasks_outside_red_runs
        notes.append(f"{len(failed)} failed task(s) in runs that did not end red: "
                     + ", ".join(f"{t['dag_id']}.{t['task_id']}" for t in failed))
    if s.api_errors:
        notes.append(f"the Airflow API did not answer {len(s.api_errors)} time(s) (red runs may be missed then)")
    if s.unclassified:
        notes.append(f"{len(s.unclassified)} command line(s) matched no role (counted as `other`)")
    notes += incomplete
    verdict = "fail" if reasons else "incomplete" if incomplete else "pass"
    return verdict, reasons, notes
