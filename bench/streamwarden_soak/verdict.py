"""The soak's summary and verdict: the data (:mod:`.judge`), the behaviour (:mod:`.outcomes`) and the platform's
figures over the run (memory per role, disk, open files, the stop: the long run's own analysis)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from streamwarden_longrun.analysis import Death, Summary, summarize
from streamwarden_longrun.records import RunLog

from .bounds import Halves, bounded
from .judge import DataVerdict, judge_data
from .outcomes import Behaviour, behaviour, read_soak
from .plan import OPERATOR_KINDS, FaultKind

DEATH_GRACE_S = 60.0


@dataclass
class SoakSummary:
    options: dict[str, Any]
    faults_planned: int
    faults_injected: int
    faults_by_kind: dict[str, int]
    data: DataVerdict
    behaviour: Behaviour
    final_validation: dict[str, Any]
    caught_up_s: float | None
    unexplained_deaths: list[str]
    fds: dict[str, Any]
    bounds_judged: bool
    bounds: list[Halves]
    platform: Summary
    verdict: str
    reasons: list[str]

    def to_json(self) -> dict[str, Any]:
        document = asdict(self)
        document["data"] = self.data.to_json()
        document["behaviour"] = self.behaviour.to_json()
        return document


def unexplained_deaths(deaths: list[Death], faults: list[dict[str, Any]]) -> list[str]:
    """The stream deaths no fault explains: a kill, a hang or an operator's action of the stream near the death,
    or a broker pause for an ENVIRONMENT death (a stream that starts while the broker does not answer gives up
    after its broker timeout, classified, and is restarted; any other class then is a defect)."""
    def window(fault: dict[str, Any]) -> tuple[float, float]:
        return fault["began_s"] - 2, (fault.get("ended_s") or fault["began_s"]) + DEATH_GRACE_S

    killing = [window(f) for f in faults if f["injected"]
               and f["kind"] in (FaultKind.KILL_STREAM, FaultKind.HANG_STREAM, *OPERATOR_KINDS)]
    pauses = [window(f) for f in faults if f["injected"] and f["kind"] == FaultKind.PAUSE_BROKER]
    return [f"pid {d.pid} at {d.at_s / 60:.1f} min ({d.failure_class or 'no failure document'}: "
            f"{(d.message or '')[:200]})" for d in deaths
            if not any(start <= d.at_s <= end for start, end in killing)
            and not (d.failure_class == "ENVIRONMENT" and any(start <= d.at_s <= end for start, end in pauses))]


def _fds(soak: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    counts = [(r["at_s"], r["open_files"]) for r in soak.get("gauge", [])]
    if not counts:
        return {"samples": 0}
    values = [value for _, value in counts]
    return {"samples": len(values), "first": values[0], "max": max(values), "last": values[-1]}


def summarize_soak(results: Path, output: Path, options: dict[str, Any]) -> SoakSummary:
    log = RunLog.read(results / "samples.jsonl")
    soak = read_soak(results / "soak.jsonl")
    platform = summarize(log)
    settle = (soak.get("settle") or [{}])[0]
    faults = soak.get("fault", [])
    malformed = [(str(f["target"]), int(p), int(o)) for f in faults if f["kind"] == FaultKind.MALFORMED_BURST
                 for p, o in f.get("detail", {}).get("landed", [])]
    data = judge_data(output, results, settle.get("end_offsets") or {}, malformed)
    seen = behaviour(log, soak, results / "run-files" / "alerts.jsonl")
    window_end = settle.get("at_s") or (log.samples[-1].elapsed_s if log.samples else 0.0)
    judged, halves = bounded(log, soak.get("gauge", []), float(options.get("warmup_minutes", 0)) * 60, window_end)
    plan = (soak.get("plan") or [{}])[0]
    injected = [f for f in faults if f["injected"]]
    summary = SoakSummary(
        options=options, faults_planned=len(plan.get("faults", [])), faults_injected=len(injected),
        faults_by_kind={kind.value: sum(1 for f in injected if f["kind"] == kind) for kind in FaultKind},
        data=data, behaviour=seen, final_validation=settle.get("final_validation") or {},
        caught_up_s=settle.get("caught_up_s"), unexplained_deaths=unexplained_deaths(platform.stream.deaths, faults),
        fds=_fds(soak), bounds_judged=judged, bounds=halves, platform=platform, verdict="", reasons=[])
    summary.reasons = reasons(summary, int(options.get("min_faults", 0)))
    summary.verdict = "fail" if summary.reasons else "pass"
    return summary


def reasons(s: SoakSummary, min_faults: int) -> list[str]:
    found = list(s.data.problems)
    b, p = s.behaviour, s.platform
    if s.faults_injected < min_faults:
        found.append(f"{s.faults_injected} fault(s) injected, fewer than {min_faults}")
    if s.final_validation.get("state") != "success":
        found.append(f"the final validate_output did not pass: {json.dumps(s.final_validation)}")
    if s.caught_up_s is None:
        found.append("the stream did not catch up with the broker's end offsets after the faults stopped")
    if b.unexplained:
        found.append(f"{len(b.unexplained)} alert(s) no fault explains: " + "; ".join(
            f"{a.raised_s / 60:.1f} min {a.source}: {a.summary[:160]}" for a in b.unexplained[:5]))
    found += [f"missed detection: {line}" for line in b.missed]
    found += [f"stream death no fault caused: {line}" for line in s.unexplained_deaths]
    if b.breaker_opened:
        found.append(f"the warden's circuit breaker opened (a restart loop): {b.breaker_opened[0]}")
    if b.second_stream:
        found.append("two stream drivers at once: " + "; ".join(b.second_stream[:3]))
    if b.leftovers or p.leftovers:
        found.append(f"processes left behind: {b.leftovers or p.leftovers}")
    if b.soak_errors:
        found.append(f"the soak itself failed to act {len(b.soak_errors)} time(s): {b.soak_errors[:3]}")
    if p.platform_exited:
        found.append(f"`up` exited before the stop: {p.platform_exited}")
    elif p.stop and (p.stop.get("killed") or p.stop.get("exit_code") != 0):
        found.append(f"`up` did not stop cleanly: {p.stop}")
    growing = [h for h in s.bounds if not h.bounded]
    if growing:
        found.append("not bounded (the second half's peak against the first's): " + ", ".join(
            f"{h.what} {h.first_max:,.0f} -> {h.second_max:,.0f}" for h in growing))
    return found
