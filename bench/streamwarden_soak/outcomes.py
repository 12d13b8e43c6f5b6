"""The soak's verdict on the platform's behaviour: each fault detected and healed (and how fast), every alert
explained by a fault, availability, no restart loop, no second stream, nothing left behind.

Times are seconds after `up` was started. A fault is *detected* when the platform acted on it (the warden started
a new stream; Airflow ended the killed task's run red) and *healed* when the stream committed again afterwards.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from streamwarden_longrun.records import EventType, RunLog

from .plan import OPERATOR_KINDS, FaultKind, WorkloadKind

DETECTION_LIMIT_S = 900.0
"""A fault the platform has not acted on this long after it began is a missed detection."""


@dataclass
class FaultOutcome:
    index: int
    kind: str
    began_s: float
    injected: bool
    target: str
    detected_s: float | None = None  # after began_s
    healed_s: float | None = None
    how: str = ""


@dataclass
class AlertOutcome:
    raised_s: float
    source: str
    failure_class: str | None
    summary: str
    explained_by: str | None  # "fault 12 kill_stream", "workload: ...", or None


@dataclass
class Timings:
    kind: str
    count: int
    p50_s: float | None
    p95_s: float | None
    max_s: float | None


@dataclass
class Behaviour:
    faults: list[FaultOutcome]
    alerts: list[AlertOutcome]
    detection: list[Timings]
    healing: list[Timings]
    missed: list[str]
    availability: float | None
    minutes_judged: int
    stream_starts: int
    stream_killing_faults: int
    breaker_opened: list[str]
    second_stream: list[str]
    leftovers: list[str]
    soak_errors: list[str] = field(default_factory=list)

    @property
    def unexplained(self) -> list[AlertOutcome]:
        return [alert for alert in self.alerts if alert.explained_by is None]

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "unexplained": [asdict(a) for a in self.unexplained]}


def read_soak(path: Path) -> dict[str, list[dict[str, Any]]]:
    records: dict[str, list[dict[str, Any]]] = {}
    for line in path.read_text().splitlines():
        try:
            document = json.loads(line)
        except json.JSONDecodeError:
            continue
        records.setdefault(document.pop("type"), []).append(document)
    return records


def epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _timings(outcomes: list[FaultOutcome], value: Callable[[FaultOutcome], float | None]) -> list[Timings]:
    found: list[Timings] = []
    for kind in FaultKind:
        values = sorted(v for o in outcomes if o.kind == kind and (v := value(o)) is not None)
        if not values:
            found.append(Timings(kind.value, 0, None, None, None))
            continue
        p95 = values[min(len(values) - 1, round(0.95 * (len(values) - 1)))]
        found.append(Timings(kind.value, len(values), round(statistics.median(values), 1), round(p95, 1),
                             round(values[-1], 1)))
    return found


class _Timeline:
    def __init__(self, log: RunLog) -> None:
        start = epoch(log.info.started_at)
        self.start = start
        self.commits = sorted(t - start for sample in log.samples for t in sample.commit_times)
        self.starts = [(e.elapsed_s, int(e.detail["pid"])) for e in log.of_type(EventType.STREAM_STARTED)]
        self.red_runs = {str(e.detail["run_id"]): e.elapsed_s for e in log.of_type(EventType.RED_RUN)}
        self.failed_tasks = {(str(e.detail["run_id"]), str(e.detail["task_id"])): e.elapsed_s
                             for e in log.of_type(EventType.FAILED_TASK)}

    def first_commit_after(self, at_s: float) -> float | None:
        return next((t for t in self.commits if t > at_s), None)

    def first_start_after(self, at_s: float) -> float | None:
        return next((t for t, _ in self.starts if t > at_s), None)


def _fault_outcome(fault: dict[str, Any], timeline: _Timeline) -> FaultOutcome:
    outcome = FaultOutcome(fault["index"], fault["kind"], fault["began_s"], fault["injected"], fault["target"])
    if not outcome.injected:
        outcome.how = f"not injected: {fault['why_not']}"
        return outcome
    began, kind, detail = outcome.began_s, FaultKind(fault["kind"]), fault.get("detail", {})
    if kind in (FaultKind.KILL_STREAM, FaultKind.HANG_STREAM):
        started = timeline.first_start_after(began)
        if started is not None:
            outcome.detected_s = round(started - began, 1)
            commit = timeline.first_commit_after(started)
            outcome.healed_s = None if commit is None else round(commit - began, 1)
            outcome.how = "the warden started a new stream"
    elif kind == FaultKind.PAUSE_BROKER:
        resumed = began + float(detail.get("pause_s", 0))
        commit = timeline.first_commit_after(resumed)
        outcome.healed_s = None if commit is None else round(commit - began, 1)
        outcome.how = "the stream committed again after the broker resumed"
    elif kind in (FaultKind.KILL_COMPACTION, FaultKind.KILL_VACUUM):
        run_id, task_id = str(detail.get("dag_run")), str(detail.get("task_id"))
        failed = timeline.failed_tasks.get((run_id, task_id), timeline.red_runs.get(run_id))
        if failed is not None:
            outcome.detected_s = round(max(0.0, failed - began), 1)
            outcome.how = f"{task_id} failed in Airflow"
    elif kind in OPERATOR_KINDS:
        verdict = "as it should" if detail.get("as_expected") else "NOT as it should"
        outcome.how = f"{detail.get('dag_run')} ended {detail.get('state')}, {verdict} ({detail.get('expected')})"
        if detail.get("as_expected") and fault.get("ended_s") is not None:
            outcome.healed_s = round(fault["ended_s"] - began, 1)
    elif kind in (FaultKind.KILL_SCHEDULER, FaultKind.KILL_TRIGGERER) and fault.get("ended_s") is not None:
        outcome.healed_s = round(fault["ended_s"] - began, 1)
        outcome.how = "started again by the soak (as a process supervisor would)"
    return outcome


NEEDS_DETECTION = (FaultKind.KILL_STREAM, FaultKind.HANG_STREAM, FaultKind.KILL_COMPACTION, FaultKind.KILL_VACUUM)


@dataclass(frozen=True)
class Explanation:
    """Alerts a fault (or the workload) may cause: by the DAG that raised them and what they say, within a window."""

    kinds: tuple[str, ...]
    sources: tuple[str, ...]  # prefixes of the alert's source (dag_id/run_id); empty: any
    says: tuple[str, ...]  # words of the summary or failure class (any one); empty: any
    window_s: float


EXPLANATIONS: tuple[Explanation, ...] = (
    Explanation((FaultKind.KILL_STREAM, FaultKind.HANG_STREAM), ("stream_supervisor",),
                ("restarted", "DEAD", "HUNG", "no live process"), 600),
    Explanation((FaultKind.PAUSE_BROKER,), (), ("broker", "ENVIRONMENT", "no answer", "lag", "UNKNOWN"), 600),
    Explanation((FaultKind.KILL_COMPACTION, FaultKind.KILL_VACUUM), ("maintain_tables",), (), 900),
    Explanation((FaultKind.KILL_SCHEDULER, FaultKind.KILL_TRIGGERER), (), (), 600),
    Explanation((FaultKind.RECOVER_STREAM,), ("recover_stream",), (), 600),
    Explanation((FaultKind.UPGRADE_RELEASE, FaultKind.UPGRADE_FAILING), ("upgrade_stream",), (), 600),
    Explanation((WorkloadKind.RESTART_SESSIONS,), ("restart_sessions",), ("sites-4", "sites-5"), 3600),
)


def _explain(alert: AlertOutcome, faults: list[dict[str, Any]], workload: list[dict[str, Any]]) -> str | None:
    text = f"{alert.summary} {alert.failure_class or ''}"
    causes = [(f["began_s"], f["kind"], f"fault {f['index']} {f['kind']}", f.get("ended_s") or f["began_s"])
              for f in faults if f["injected"]]
    causes += [(w["at_s"], w["kind"], f"workload {w['kind']} at {w['at_s']:.0f} s", w["at_s"]) for w in workload]
    for rule in EXPLANATIONS:
        if rule.sources and not any(alert.source.startswith(s) for s in rule.sources):
            continue
        if rule.says and not any(word in text for word in rule.says):
            continue
        for began, kind, name, ended in sorted(causes, reverse=True):
            if kind in rule.kinds and began - 5 <= alert.raised_s <= ended + rule.window_s:
                return name
    return None


def behaviour(log: RunLog, soak: dict[str, list[dict[str, Any]]], alerts_path: Path) -> Behaviour:
    timeline = _Timeline(log)
    faults = soak.get("fault", [])
    workload = soak.get("workload", [])
    outcomes = [_fault_outcome(fault, timeline) for fault in sorted(faults, key=lambda f: f["began_s"])]
    missed = [f"fault {o.index} {o.kind} at {o.began_s / 60:.1f} min: not acted on within {DETECTION_LIMIT_S:.0f} s"
              for o in outcomes if o.injected and FaultKind(o.kind) in NEEDS_DETECTION
              and (o.detected_s is None or o.detected_s > DETECTION_LIMIT_S)]
    missed += [f"fault {o.index} {o.kind} at {o.began_s / 60:.1f} min: {o.how}" for o in outcomes
               if o.injected and FaultKind(o.kind) in OPERATOR_KINDS and o.healed_s is None]
    alerts: list[AlertOutcome] = []
    if alerts_path.is_file():
        for line in alerts_path.read_text().splitlines():
            document = json.loads(line)
            alert = AlertOutcome(round(epoch(document["raised_at"]) - timeline.start, 1), document.get("source", ""),
                                 document.get("failure_class"), document.get("summary", ""), None)
            alert.explained_by = _explain(alert, faults, workload)
            alerts.append(alert)
    settle = (soak.get("settle") or [{}])[0]
    first = timeline.commits[0] if timeline.commits else None
    last_fault_end = settle.get("at_s") or (log.samples[-1].elapsed_s if log.samples else 0)
    minutes = [] if first is None else list(range(int(first // 60) + 1, int(last_fault_end // 60)))
    committed = {int(t // 60) for t in timeline.commits}
    availability = round(sum(m in committed for m in minutes) / len(minutes), 4) if minutes else None
    second = [f"{s.roles['stream-driver-python'].processes} stream drivers at {s.elapsed_s / 60:.1f} min"
              for s in log.samples if "stream-driver-python" in s.roles
              and s.roles["stream-driver-python"].processes > 1]
    breaker = [a.summary for a in alerts if "circuit breaker" in a.summary.lower()]
    leftovers = [f"pid {e.detail['pid']} ({e.detail['role']})" for e in log.of_type(EventType.LEFTOVER)]
    killing = sum(1 for o in outcomes if o.injected and FaultKind(o.kind) in (FaultKind.KILL_STREAM,
                                                                              FaultKind.HANG_STREAM))
    return Behaviour(
        faults=outcomes, alerts=alerts, detection=_timings(outcomes, lambda o: o.detected_s),
        healing=_timings(outcomes, lambda o: o.healed_s), missed=missed, availability=availability,
        minutes_judged=len(minutes), stream_starts=len(timeline.starts), stream_killing_faults=killing,
        breaker_opened=breaker, second_stream=second, leftovers=leftovers,
        soak_errors=[f"{e['kind']} {e['index']}: {e['error']}" for e in soak.get("soak_error", [])])
