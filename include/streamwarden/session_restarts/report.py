"""What a ``restart_sessions`` run found: per site its answer, its exposure and what it lost; kept as a file.

A site without an answer by its deadline is told apart by why (:mod:`.reach`): it did not answer, or the
stream did not read that far (not running, or behind), so the answer could not reach the table.

Reports go to ``<run_root>/session_restarts/<UTC time>.json`` (0600). The newest earlier report that targeted a
site tells from when its losses are counted: what broke since its previous restart.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from streamwarden.atomic import read_json, write_json_atomic
from streamwarden.session_restarts.plan import RestartPlan, SiteTurn
from streamwarden.session_restarts.reach import Cause, SiteReach, StreamDuring
from streamwarden.session_restarts.sessions import Answer, SiteLoss, SiteSessions


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f}s"
    return f"{seconds / 60:.0f}m" if seconds < 7200 else f"{seconds / 3600:.1f}h"


@dataclass(frozen=True)
class RestartReport:
    """One run: the plan, the answers found by ``checked_at``, every site's sessions and losses, and why each
    missing answer is missing (``reach``, by request id; a turn not in it counts as the site's silence)."""

    plan: RestartPlan
    checked_at: datetime
    answers: Mapping[str, Answer]  # by request id
    sites: Mapping[str, SiteSessions]  # every site of the table, targeted or not
    losses: Mapping[str, SiteLoss]  # targeted sites, since their previous restart
    exposure_limit: float | None
    reach: Mapping[str, SiteReach] = field(default_factory=dict)
    stream: StreamDuring | None = None

    def unanswered(self) -> list[SiteTurn]:
        """The sites whose deadline passed without a new session in the output."""
        return [t for t in self.plan.turns if t.request_id not in self.answers and t.deadline <= self.checked_at]

    def cause(self, turn: SiteTurn) -> Cause:
        """Why ``turn`` (unanswered) has no answer in the table."""
        found = self.reach.get(turn.request_id)
        return Cause.SITE_SILENT if found is None else found.cause

    def unread(self) -> list[SiteTurn]:
        """Unanswered sites whose answer could not reach the table: the stream did not read that far."""
        return [t for t in self.unanswered() if self.cause(t).stream]

    def silent(self) -> list[SiteTurn]:
        """Unanswered sites the stream is not to blame for (read past their deadline, or not checked)."""
        return [t for t in self.unanswered() if not self.cause(t).stream]

    def overexposed(self) -> list[SiteSessions]:
        """Sites whose last clean session start is older than the exposure limit (none without a schedule)."""
        limit = self.exposure_limit
        if limit is None:
            return []
        return [s for s in self.sites.values() if (s.exposure(self.checked_at) or 0.0) > limit]

    @property
    def passed(self) -> bool:
        return not self.unanswered() and not self.overexposed()

    def text(self) -> str:
        """Per targeted site: answer, sessions, exposure and loss; then the over-exposed others."""
        header = (f"{'site':<24} {'answered':<21} {'new':>4} {'last clean start':<20} {'exposure':>8} "
                  f"{'damaged':>7} {'lost':>6} {'over':>6}")
        lines = [header]
        for turn in self.plan.turns:
            answer = self.answers.get(turn.request_id)
            state = self.sites.get(turn.site)
            loss = self.losses.get(turn.site)
            start = state.last_clean_start if state else None
            answered = (f"{answer.opened_at:%H:%M:%S} @{answer.partition}:{answer.offset}" if answer else
                        _MISSING[self.cause(turn)] if turn.deadline <= self.checked_at else "waiting")
            lines.append(f"{turn.site:<24} {answered:<21} {answer.sessions if answer else 0:>4} "
                         f"{f'{start:%Y-%m-%d %H:%M:%S}' if start else '-':<20} "
                         f"{_age(state.exposure(self.checked_at) if state else None):>8} "
                         f"{state.damaged_sessions if state else 0:>7} {loss.records if loss else 0:>6} "
                         f"{_age(loss.span_s) if loss else '-':>6}")
        targeted = {t.site for t in self.plan.turns}
        others = [s for s in self.overexposed() if s.site not in targeted]
        lines += [f"{s.site:<24} {'(not targeted)':<21} {'':>4} {f'{s.last_clean_start:%Y-%m-%d %H:%M:%S}':<20} "
                  f"{_age(s.exposure(self.checked_at)):>8} {s.damaged_sessions:>7}" for s in others]
        limit = f"; exposure limit {_age(self.exposure_limit)}" if self.exposure_limit else ""
        lines.append(f"{len(self.answers)}/{len(self.plan.turns)} sites answered by {self.checked_at:%H:%M:%S} UTC"
                     f"{limit}; lost = integrity dead letters since the site's previous restart (over = their span)")
        lines += [f"{self.reach[t.request_id].site}: {self.reach[t.request_id].evidence()}"
                  for t in self.unanswered() if t.request_id in self.reach]
        if self.unread() and self.stream is not None:
            lines.append(f"the stream: {self.stream.describe()}")
        return "\n".join(lines)

    def summary(self, path: Path | None = None) -> dict[str, Any]:
        """The JSON pushed to XCom and written to the report file."""
        now = self.checked_at
        return {
            "run_key": self.plan.run_key, "checked_at": now.isoformat(), "passed": self.passed,
            "plan": self.plan.to_json(), "answers": {k: a.to_json() for k, a in self.answers.items()},
            "unanswered": [t.to_json() | {"last_clean_start": _start(self.sites.get(t.site)),
                                          "exposure_s": _exposure(self.sites.get(t.site), now),
                                          "cause": self.cause(t).value,
                                          "reach": _reach(self.reach.get(t.request_id))}
                           for t in self.unanswered()],
            "stream": None if self.stream is None else self.stream.to_json(),
            "overexposed": [s.to_json(now) for s in self.overexposed()],
            "sites": {name: s.to_json(now) for name, s in sorted(self.sites.items())},
            "losses": {name: loss.to_json() for name, loss in sorted(self.losses.items())},
            "exposure_limit_s": self.exposure_limit, "report": None if path is None else str(path),
        }


_MISSING = {Cause.SITE_SILENT: "NO (deadline passed)", Cause.UNCHECKED: "NO? (not checked)",
            Cause.STREAM_NOT_RUNNING: "UNREAD: stream down", Cause.STREAM_BEHIND: "UNREAD: stream behind"}
"""The answered column of a site without an answer by its deadline, by cause (21 characters at most)."""


def _reach(found: SiteReach | None) -> dict[str, Any] | None:
    return None if found is None else found.to_json()


def _start(state: SiteSessions | None) -> str | None:
    start = state.last_clean_start if state else None
    return None if start is None else start.isoformat()


def _exposure(state: SiteSessions | None, now: datetime) -> float | None:
    return state.exposure(now) if state else None


def write_report(folder: Path, report: RestartReport) -> Path:
    """Write the report as ``<folder>/<UTC time>.json`` (0600; the folder 0700); its path."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = folder / f"{report.checked_at.astimezone(UTC):%Y%m%dT%H%M%S.%fZ}.json"
    document = report.summary(path)
    write_json_atomic(path, document)
    os.chmod(path, 0o600)
    return path


def previous_restarts(folder: Path, before: datetime) -> dict[str, datetime]:
    """Per site, when it last restarted in a run planned before ``before``: its new session's start where the
    report found the answer, else the time it was asked to (its turn). A run's losses are counted from there, so
    what the previous run already reported is not counted again."""
    since: dict[str, datetime] = {}
    if not folder.is_dir():
        return since
    for path in sorted(folder.glob("*.json")):
        document = read_json(path)
        plan = RestartPlan.from_json(document["plan"])
        if plan.created_at < before:
            answers = document.get("answers") or {}
            since.update({turn.site: datetime.fromisoformat(answers[turn.request_id]["opened_at"])
                          if turn.request_id in answers else turn.not_before for turn in plan.turns})
    return since
