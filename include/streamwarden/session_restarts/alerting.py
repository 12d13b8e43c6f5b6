"""What a person is told about session restarts: sites that did not answer, answers the stream did not read,
sites exposed for too long.

Each alert carries the failure class, the evidence per site and the next action: the DAG to trigger and its
Params. ``RESTART_UNANSWERED``: the stream read past the site's deadline and found no answer (check the
collection point). ``STREAM_NOT_RUNNING`` / ``STREAM_BEHIND``: the stream committed nothing after the
deadline, or had not caught up, so an answer could not reach the table (check the stream, not the site).
``EXPOSURE``: a site's last clean session start is too old. An unanswered restart alerts once per run; the
same exposure (the same sites since the same clean starts) alerts once, whichever DAG (``restart_sessions``
or ``validate_output``) finds it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from streamwarden.alerts import Alert
from streamwarden.durations import duration_text
from streamwarden.session_restarts.plan import SiteTurn
from streamwarden.session_restarts.reach import Cause
from streamwarden.session_restarts.report import RestartReport
from streamwarden.session_restarts.sessions import SiteSessions

UNANSWERED, EXPOSURE = "RESTART_UNANSWERED", "EXPOSURE"
_SHOWN = 10


def _key(kind: str, parts: object) -> str:
    return f"{kind.lower()}:" + hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def _restart(sites: Sequence[str], reason: str) -> str:
    return f"trigger restart_sessions with Params {json.dumps({'sites': sorted(sites), 'reason': reason})}"


def _site_evidence(report: RestartReport, turn: SiteTurn) -> str:
    """Its request and deadline, its last clean session start, and where the stream stood (when checked)."""
    state = report.sites.get(turn.site)
    start = state.last_clean_start if state else None
    reached = report.reach.get(turn.request_id)
    return (f"{turn.site}: no new session for {turn.request_id} by {turn.deadline.isoformat()}; last clean session "
            f"start {start.isoformat() if start else 'never'}"
            + (f" ({state.exposure(report.checked_at) or 0:.0f}s ago, {state.open_sessions} open, "
               f"{state.damaged_sessions} damaged)" if state and start else "")
            + (f"; {reached.evidence()}" if reached else ""))


def _shown(names: Sequence[str]) -> str:
    return ", ".join(names[:_SHOWN]) + (f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")


def unanswered_alert(report: RestartReport, *, source: str, report_path: str | None) -> Alert:
    """The sites whose new session was not in the output by their deadline although the stream had read that far
    (or that could not be checked), with how exposed each stays."""
    missing: list[SiteTurn] = report.silent()
    names = [t.site for t in missing]
    failure = {"failure_class": UNANSWERED, "sites": [t.to_json() for t in missing],
               "evidence": [_site_evidence(report, t) for t in missing], "report": report_path}
    unchecked = [t.site for t in missing if report.cause(t) is Cause.UNCHECKED]
    first = (f"Whether the stream had read far enough could not be checked for {', '.join(unchecked)}: see that "
             "stream_supervisor's last check is healthy. " if unchecked else "")
    action = (f"{first}Check each collection point named: does it read the control topic and act on "
              f"restart_session (its log for the request id)? Until it restarts, its data stays exposed to a break "
              f"since its last clean start. Then {_restart(names, f'retry of {report.plan.run_key}')}.")
    return Alert("critical", f"restart_sessions: {len(names)} site(s) opened no new session by the deadline: "
                 f"{_shown(names)}"[:300], {"label": f"{UNANSWERED}({len(names)})", "run": report.plan.run_key},
                 UNANSWERED, failure, {}, action, source=source,
                 key=_key(UNANSWERED, sorted(t.request_id for t in missing)))


def unread_alert(report: RestartReport, *, source: str, report_path: str | None) -> Alert:
    """The sites whose answer could not reach the table: the stream had not read up to their deadline. Its class
    is ``STREAM_NOT_RUNNING`` when the stream committed nothing after some site's deadline, else
    ``STREAM_BEHIND``; the next action is the stream's, not the sites'."""
    unread: list[SiteTurn] = report.unread()
    names = [t.site for t in unread]
    down = any(report.cause(t) is Cause.STREAM_NOT_RUNNING for t in unread)
    kind = Cause.STREAM_NOT_RUNNING if down else Cause.STREAM_BEHIND
    stream = report.stream.describe() if report.stream else "the stream's state was not read"
    evidence = [_site_evidence(report, t) for t in unread] + [f"the stream: {stream}"]
    failure = {"failure_class": kind.value, "sites": [t.to_json() for t in unread], "evidence": evidence,
               "stream": None if report.stream is None else report.stream.to_json(), "report": report_path}
    retry = _restart(names, f"retry of {report.plan.run_key}")
    if down:
        summary = (f"restart_sessions: the stream was not running, so {len(names)} site(s)' new sessions could not "
                   f"reach session_rows: {_shown(names)}")
        action = (f"The stream committed nothing after the sites' deadline ({stream}); the sites are not to blame. "
                  "Check stream_supervisor: trigger it to start the stream (with force_restart=true when its circuit "
                  "breaker is open), or follow its last alert. Once the stream has caught up, the answers the sites "
                  f"sent land in session_rows; if a site is still exposed then, {retry}.")
    else:
        summary = (f"restart_sessions: the stream was behind, so {len(names)} site(s)' new sessions had not reached "
                   f"session_rows by the deadline: {_shown(names)}")
        action = (f"The stream runs but had not read up to the sites' deadline ({stream}); the sites are not to "
                  "blame. Check stream_supervisor's last health check (lag per partition, rows per second in and "
                  f"processed). Once the stream has caught up, the answers land in session_rows; if a site is still "
                  f"exposed then, {retry}.")
    return Alert("critical" if down else "warning", summary[:300],
                 {"label": f"{kind.value}({len(names)})", "run": report.plan.run_key}, kind.value, failure, {},
                 action, source=source, key=_key(kind.value, sorted(t.request_id for t in unread)))


def exposure_alert(sites: Sequence[SiteSessions], *, limit: float, now: datetime, source: str,
                   report_path: str | None) -> Alert:
    """Sites whose last clean session start is older than ``limit`` seconds (1.5 restart intervals)."""
    evidence = [f"{s.site}: last clean session start {s.last_clean_start.isoformat() if s.last_clean_start else '-'}, "
                f"{duration_text(s.exposure(now) or 0)} ago (limit {duration_text(limit)}); {s.open_sessions} open, "
                f"{s.damaged_sessions} damaged" for s in sites]
    names = [s.site for s in sites]
    failure: Mapping[str, Any] = {
        "failure_class": EXPOSURE, "limit_s": limit, "evidence": evidence, "report": report_path,
        "sites": [s.to_json(now) for s in sites]}
    action = (f"A break in these sites' data since their last clean start would not have been repaired: "
              f"{_restart(names, 'exposure over the limit')}; if they do not answer, check the collection points; "
              "if restarts are not scheduled, set STREAMWARDEN_SESSION_RESTART_SCHEDULE.")
    places = sorted((s.site, s.last_clean_start.isoformat() if s.last_clean_start else None) for s in sites)
    return Alert("warning", f"{len(names)} site(s) exposed beyond {duration_text(limit)} since a clean session start: "
                 f"{', '.join(names[:_SHOWN])}"[:300], {"label": f"{EXPOSURE}({len(names)})"}, EXPOSURE,
                 dict(failure), {}, action, source=source, key=_key(EXPOSURE, places))
