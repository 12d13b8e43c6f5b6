"""Which site restarts when: the sites found on the broker, each given a turn spread over the jitter window.

The turns are spread evenly, ``jitter / n`` apart, in an order shuffled per run (a hash of the run and the
site), so no site is always first and no two sites' snapshots land in one micro-batch when the window is
wider than ``n`` trigger intervals. Each site gets its own request id, command and deadline (its turn plus
the request's deadline).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from streamwarden.control.commands import RestartSession
from streamwarden.failures import ConfigError
from streamwarden.kafka.admin import list_partitions, metadata_consumer
from streamwarden.session_restarts.request import RestartRequest
from streamwarden.settings import Settings


@dataclass(frozen=True)
class SiteTurn:
    """One site's part of a plan."""

    site: str
    request_id: str
    not_before: datetime
    deadline: datetime

    def to_json(self) -> dict[str, str]:
        return {"site": self.site, "request_id": self.request_id, "not_before": self.not_before.isoformat(),
                "deadline": self.deadline.isoformat()}

    @classmethod
    def from_json(cls, document: Mapping[str, str]) -> SiteTurn:
        return cls(document["site"], document["request_id"], datetime.fromisoformat(document["not_before"]),
                   datetime.fromisoformat(document["deadline"]))


@dataclass(frozen=True)
class RestartPlan:
    """The commands of one run, one per site, in turn order."""

    run_key: str
    created_at: datetime
    reason: str
    turns: tuple[SiteTurn, ...]

    @property
    def deadline(self) -> datetime:
        """The last site's deadline: when waiting for answers ends."""
        return max(turn.deadline for turn in self.turns)

    def commands(self) -> list[RestartSession]:
        """The ``restart_session`` command of each site."""
        return [RestartSession(t.request_id, t.site, self.reason, issued_at=self.created_at, not_before=t.not_before,
                               deadline=t.deadline) for t in self.turns]

    def text(self) -> str:
        """The plan as a table a person reads in the task log."""
        lines = [f"{'site':<32} {'request id':<28} {'turn (UTC)':<20} deadline (UTC)"]
        lines += [f"{t.site:<32} {t.request_id:<28} {t.not_before:%Y-%m-%d %H:%M:%S}  {t.deadline:%Y-%m-%d %H:%M:%S}"
                  for t in self.turns]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {"run_key": self.run_key, "created_at": self.created_at.isoformat(), "reason": self.reason,
                "turns": [t.to_json() for t in self.turns]}

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> RestartPlan:
        return cls(document["run_key"], datetime.fromisoformat(document["created_at"]), document["reason"],
                   tuple(SiteTurn.from_json(t) for t in document["turns"]))


def stream_sites(settings: Settings, timeout: float = 10.0) -> list[str]:
    """The site topics on the broker that the stream reads (``STREAMWARDEN_TOPIC_PATTERN``)."""
    consumer = metadata_consumer(settings.kafka_client_config())
    try:
        return sorted({tp.topic for tp in list_partitions(consumer, settings.topic_pattern, timeout)})
    finally:
        consumer.close()


def choose_sites(request: RestartRequest, known: Sequence[str]) -> list[str]:
    """The sites ``request`` targets among the ``known`` ones; CONFIG when a named one is unknown or none match."""
    if request.sites:
        missing = sorted(set(request.sites) - set(known))
        if missing:
            raise ConfigError(f"Param sites: no topic {', '.join(missing)} on the broker (sites of this stream: "
                              f"{', '.join(known) or 'none'})", details={"missing": missing})
        return list(request.sites)
    chosen = [s for s in known if request.pattern is None or re.fullmatch(request.pattern, s)]
    if not chosen:
        raise ConfigError(f"no site to restart: {request.describe()} matches none of {', '.join(known) or 'no topic'}"
                          " on the broker", details={"pattern": request.pattern})
    return chosen


def make_plan(request: RestartRequest, sites: Sequence[str], *, run_key: str, now: datetime) -> RestartPlan:
    """Turns for ``sites``: spread over ``request.jitter`` from ``now``, each with its deadline."""
    order = sorted(sites, key=lambda site: hashlib.sha256(f"{run_key}/{site}".encode()).digest())
    step = request.jitter / len(order)
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    turns = []
    for index, site in enumerate(order):
        turn = now + timedelta(seconds=index * step)
        turns.append(SiteTurn(site, f"restart-{stamp}-{index:04d}", turn, turn + timedelta(seconds=request.deadline)))
    return RestartPlan(run_key, now, request.reason, tuple(turns))
