"""The seeded plan: which fault (and which workload event) happens when, a pure function of the seed.

Faults arrive as a Poisson process at ``per_hour`` between the warm-up and the settle window; each draws its
kind by weight and its own parameters (how long a pause lasts, how many malformed records) from the same
generator, so one seed always gives the same plan. The workload's events (bursts of traffic, session restart
requests at jittered times) come from a second generator of the same seed: changing the fault rate does not
move them.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


class FaultKind(StrEnum):
    KILL_STREAM = "kill_stream"  # kill -9 of the stream's process group
    HANG_STREAM = "hang_stream"  # SIGSTOP of the stream's processes for longer than the hang limit, then SIGCONT
    PAUSE_BROKER = "pause_broker"  # SIGSTOP of the broker for 30-90 s
    KILL_COMPACTION = "kill_compaction"  # kill -9 of a maintain_tables task while it compacts
    KILL_VACUUM = "kill_vacuum"  # kill -9 of a maintain_tables task while it vacuums
    KILL_SCHEDULER = "kill_scheduler"  # kill -9 of Airflow's scheduler, started again after a pause
    KILL_TRIGGERER = "kill_triggerer"  # kill -9 of Airflow's triggerer (the warden's watch), started again
    MALFORMED_BURST = "malformed_burst"  # undecodable records into one site topic
    RECOVER_STREAM = "recover_stream"  # a recover_stream run to the last validated version, approved over REST
    UPGRADE_RELEASE = "upgrade_release"  # an upgrade_stream run to a release that works
    UPGRADE_FAILING = "upgrade_failing"  # an upgrade_stream run to a release whose batches fail: rolled back


OPERATOR_KINDS = (FaultKind.RECOVER_STREAM, FaultKind.UPGRADE_RELEASE, FaultKind.UPGRADE_FAILING)
"""Rare by weight, but each in every plan whose window and kinds allow: a drawn fault is turned into any missing."""


class WorkloadKind(StrEnum):
    BURST = "burst"  # a second producer at a multiple of the steady rate for a while
    RESTART_SESSIONS = "restart_sessions"  # a restart_sessions run triggered, as its jittered schedule would


WEIGHTS: dict[FaultKind, float] = {
    FaultKind.KILL_STREAM: 3, FaultKind.HANG_STREAM: 1.5, FaultKind.PAUSE_BROKER: 1.5,
    FaultKind.KILL_COMPACTION: 1.5, FaultKind.KILL_VACUUM: 1.5, FaultKind.KILL_SCHEDULER: 1,
    FaultKind.KILL_TRIGGERER: 1, FaultKind.MALFORMED_BURST: 2, FaultKind.RECOVER_STREAM: 0.2,
    FaultKind.UPGRADE_RELEASE: 0.2, FaultKind.UPGRADE_FAILING: 0.2,
}
"""Relative frequency of each kind (the stream's own deaths most often: they are what the warden is for)."""


@dataclass(frozen=True)
class Planned:
    """One thing the soak will do: at ``at_s`` seconds after the platform's start."""

    index: int
    at_s: float
    kind: str  # a FaultKind or a WorkloadKind
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def is_fault(self) -> bool:
        return self.kind in FaultKind.__members__.values()

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _params(kind: FaultKind, rng: random.Random) -> dict[str, Any]:
    if kind == FaultKind.PAUSE_BROKER:
        return {"pause_s": round(rng.uniform(30, 90), 1)}
    if kind == FaultKind.HANG_STREAM:
        return {"extra_s": round(rng.uniform(20, 60), 1)}  # beyond the hang limit the warden judges by
    if kind in (FaultKind.KILL_SCHEDULER, FaultKind.KILL_TRIGGERER):
        return {"down_s": round(rng.uniform(5, 30), 1)}
    if kind == FaultKind.MALFORMED_BURST:
        return {"records": rng.randint(5, 50), "site": rng.randint(0, 1_000_000)}  # site: modulo the sites
    if kind in (FaultKind.KILL_COMPACTION, FaultKind.KILL_VACUUM):
        return {"delay_s": round(rng.uniform(0, 0.5), 2)}  # into the task before the kill
    return {}


def fault_plan(seed: int, start_s: float, end_s: float, per_hour: float,
               kinds: tuple[FaultKind, ...] = tuple(FaultKind)) -> list[Planned]:
    """Faults between ``start_s`` and ``end_s``: Poisson arrivals at ``per_hour``, kinds by :data:`WEIGHTS`."""
    rng = random.Random(f"faults:{seed}")
    weights = [WEIGHTS[kind] for kind in kinds]
    planned: list[Planned] = []
    at = start_s
    while per_hour > 0:
        at += rng.expovariate(per_hour / 3600)
        if at >= end_s:
            break
        kind = rng.choices(kinds, weights)[0]
        planned.append(Planned(len(planned), round(at, 1), kind.value, _params(kind, rng)))
    missing = [kind for kind in OPERATOR_KINDS if kind in kinds and all(p.kind != kind for p in planned)]
    others = [p.index for p in planned if FaultKind(p.kind) not in OPERATOR_KINDS]
    for kind, index in zip(missing, rng.sample(others, min(len(missing), len(others))), strict=False):
        planned[index] = Planned(index, planned[index].at_s, kind.value, _params(kind, rng))
    return planned


def workload_plan(seed: int, start_s: float, end_s: float, bursts_per_hour: float = 6,
                  restarts_per_hour: float = 4) -> list[Planned]:
    """Bursts (20-60 s at 2-4x the steady rate) and session restart requests, each at jittered intervals."""
    rng = random.Random(f"workload:{seed}")
    events: list[tuple[float, WorkloadKind, dict[str, Any]]] = []
    for kind, per_hour in ((WorkloadKind.BURST, bursts_per_hour), (WorkloadKind.RESTART_SESSIONS, restarts_per_hour)):
        if per_hour <= 0:
            continue
        spacing = 3600 / per_hour
        at = start_s + rng.uniform(0, spacing)
        while at < end_s:
            params = ({"seconds": round(rng.uniform(20, 60), 1), "factor": round(rng.uniform(2, 4), 1)}
                      if kind == WorkloadKind.BURST else {})
            events.append((round(at, 1), kind, params))
            at += spacing * rng.uniform(0.5, 1.5)
    events.sort(key=lambda event: event[0])
    return [Planned(index, at, kind.value, params) for index, (at, kind, params) in enumerate(events)]
