"""What a person is told about session restarts: sites that did not answer, sites exposed for too long.

Each alert carries the failure class (``RESTART_UNANSWERED``, ``EXPOSURE``), the evidence per site (its
last clean session start and its age, open and damaged sessions) and the next action: the DAG to trigger
and its Params. An unanswered restart alerts once per run; the same exposure (the same sites since the
same clean starts) alerts once, whichever DAG (``restart_sessions`` or ``validate_output``) finds it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from streamwarden.restarts.plan import SiteTurn
from streamwarden.restarts.report import RestartReport
from streamwarden.restarts.sessions import SiteSessions
from streamwarden.warden.alerts import Alert

UNANSWERED, EXPOSURE = "RESTART_UNANSWERED", "EXPOSURE"
_SHOWN = 10


def _key(kind: str, parts: object) -> str:
    return f"{kind.lower()}:" + hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def _restart(sites: Sequence[str], reason: str) -> str:
    return f"trigger restart_sessions with Params {json.dumps({'sites': sorted(sites), 'reason': reason})}"


def unanswered_alert(report: RestartReport, *, source: str, report_path: str | None) -> Alert:
    """The sites whose new session was not in the output by their deadline, with how exposed each stays."""
    missing: list[SiteTurn] = report.unanswered()
    now = report.checked_at
    evidence = []
    for turn in missing:
        state = report.sites.get(turn.site)
        start = state.last_clean_start if state else None
        evidence.append(
            f"{turn.site}: no new session for {turn.request_id} by {turn.deadline.isoformat()}; last clean session "
            f"start {start.isoformat() if start else 'never'}"
            + (f" ({state.exposure(now) or 0:.0f}s ago, {state.open_sessions} open, {state.damaged_sessions} "
               f"damaged)" if state and start else ""))
    names = [t.site for t in missing]
    shown = ", ".join(names[:_SHOWN]) + (f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")
    failure = {"failure_class": UNANSWERED, "sites": [t.to_json() for t in missing], "evidence": evidence,
               "report": report_path}
    action = (f"Check each collection point named: does it read the control topic and act on restart_session (its "
              f"log for the request id)? Until it restarts, its data stays exposed to a break since its last clean "
              f"start. Then {_restart(names, f'retry of {report.plan.run_key}')}.")
    return Alert("critical", f"restart_sessions: {len(names)} site(s) opened no new session by the deadline: {shown}"
                 [:300], {"label": f"{UNANSWERED}({len(names)})", "run": report.plan.run_key}, UNANSWERED, failure,
                 {}, action, source=source, key=_key(UNANSWERED, sorted(t.request_id for t in missing)))


def exposure_alert(sites: Sequence[SiteSessions], *, limit: float, now: datetime, source: str,
                   report_path: str | None) -> Alert:
    """Sites whose last clean session start is older than ``limit`` seconds (1.5 restart intervals)."""
    evidence = [f"{s.site}: last clean session start {s.last_clean_start.isoformat() if s.last_clean_start else '-'}, "
                f"{(s.exposure(now) or 0) / 60:.0f} min ago (limit {limit / 60:.0f} min); {s.open_sessions} open, "
                f"{s.damaged_sessions} damaged" for s in sites]
    names = [s.site for s in sites]
    failure: Mapping[str, Any] = {
        "failure_class": EXPOSURE, "limit_s": limit, "evidence": evidence, "report": report_path,
        "sites": [s.to_json(now) for s in sites]}
    action = (f"A break in these sites' data since their last clean start would not have been repaired: "
              f"{_restart(names, 'exposure over the limit')}; if they do not answer, check the collection points; "
              "if restarts are not scheduled, set STREAMWARDEN_SESSION_RESTART_SCHEDULE.")
    places = sorted((s.site, s.last_clean_start.isoformat() if s.last_clean_start else None) for s in sites)
    return Alert("warning", f"{len(names)} site(s) exposed beyond {limit / 60:.0f} min since a clean session start: "
                 f"{', '.join(names[:_SHOWN])}"[:300], {"label": f"{EXPOSURE}({len(names)})"}, EXPOSURE,
                 dict(failure), {}, action, source=source, key=_key(EXPOSURE, places))
