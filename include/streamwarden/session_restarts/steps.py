"""One ``restart_sessions`` run, as its DAG calls it: plan, send, look for the answers, report.

1. **plan**: the site topics on the broker that the request targets, each given a turn spread over the
   jitter window and a deadline (:mod:`.plan`).
2. **send**: one ``restart_session`` command per site on the control topic (created when missing); every
   command delivered, or an ENVIRONMENT failure (:mod:`streamwarden.control.channel`).
3. **look**: the newest ``session_rows`` asked which requests a new session answers (:mod:`.sessions`);
   the DAG's sensor repeats this until every site answered or the last deadline passed, and then, for at
   most ``CATCH_UP``, while the stream had not read a silent site's topic up to its deadline (:func:`unread`).
4. **report**: the answers, every site's sessions and exposure, and each targeted site's loss since its
   previous restart; for a site without an answer, whether the stream had read that far (:mod:`.reach`):
   if not, the stream was not running or behind, and the site is not blamed; written to
   ``<run_root>/session_restarts/`` (:mod:`.report`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.dataset as ds  # type: ignore[import-untyped, unused-ignore]

from streamwarden.control.channel import ensure_control_topic, publish_commands
from streamwarden.session_restarts.plan import RestartPlan, SiteTurn, choose_sites, make_plan, stream_sites
from streamwarden.session_restarts.reach import reach, stream_during
from streamwarden.session_restarts.report import RestartReport, previous_restarts, write_report
from streamwarden.session_restarts.request import RestartRequest
from streamwarden.session_restarts.sessions import Answer, find_answers, measure_losses, measure_sites
from streamwarden.session_restarts.settings import RestartSettings
from streamwarden.settings import Settings
from streamwarden.tables.location import QUARANTINE, SESSION_ROWS, TableLocation
from streamwarden.tables.reading import read
from streamwarden.tables.sql import bounded_connection

log = logging.getLogger("streamwarden.session_restarts")


def plan(settings: Settings, request: RestartRequest, *, run_key: str, now: datetime | None = None) -> RestartPlan:
    """Step 1: the turns of the sites ``request`` targets among those on the broker."""
    sites = choose_sites(request, stream_sites(settings))
    made = make_plan(request, sites, run_key=run_key, now=now or datetime.now(UTC))
    log.info("restarting %d site(s) (%s) over %.0f s, each with %.0f s to answer:\n%s", len(sites),
             request.describe(), request.jitter, request.deadline, made.text())
    return made


def send(settings: Settings, plan: RestartPlan) -> None:
    """Step 2: every site's command on the control topic."""
    ensure_control_topic(settings)
    publish_commands(settings, plan.commands())
    log.info("%d restart_session command(s) delivered to %s", len(plan.turns), settings.control_topic)


def _newest(settings: Settings, name: str) -> ds.Dataset | None:
    location = TableLocation.of(settings, name)
    return read(settings, name) if location.exists() else None


def look(settings: Settings, plan: RestartPlan) -> dict[str, Answer]:
    """Step 3: the answers to the plan's requests in the newest ``session_rows``, by request id."""
    rows = _newest(settings, SESSION_ROWS)
    if rows is None:
        return {}
    with bounded_connection(settings.run_paths.spill) as con:
        return find_answers(con, rows, [t.request_id for t in plan.turns])


def unread(settings: Settings, plan: RestartPlan, answers: Mapping[str, Answer], now: datetime) -> list[SiteTurn]:
    """Between steps 3 and 4: the sites past their deadline without an answer whose topic the stream had not
    read up to that deadline (:mod:`.reach`): their answers may still arrive, once it has."""
    missing = [t for t in plan.turns if t.request_id not in answers and t.deadline <= now]
    if not missing:
        return []
    found = reach(settings, missing, stream_during(settings))
    return [t for t in missing if found[t.request_id].cause.stream]


def report(settings: Settings, restarts: RestartSettings, plan: RestartPlan, *, now: datetime | None = None
           ) -> tuple[RestartReport, Path]:
    """Step 4: the report of the run, written, and its path."""
    checked_at = now or datetime.now(UTC)
    rows, dead = _newest(settings, SESSION_ROWS), _newest(settings, QUARANTINE)
    folder = settings.run_paths.session_restarts
    targeted = {t.site for t in plan.turns}
    since = {site: at for site, at in previous_restarts(folder, plan.created_at).items() if site in targeted}
    with bounded_connection(settings.run_paths.spill) as con:
        answers = {} if rows is None else find_answers(con, rows, [t.request_id for t in plan.turns])
        sites = {} if rows is None else measure_sites(con, rows, dead, now=checked_at,
                                                      session_timeout=settings.session_timeout)
        losses = {site: loss for site, loss in measure_losses(con, dead, since).items() if site in targeted}
    made = RestartReport(plan, checked_at, answers, sites, losses, restarts.exposure_limit)
    stream = stream_during(settings)
    made = replace(made, reach=reach(settings, made.unanswered(), stream), stream=stream)
    path = write_report(folder, made)
    log.info("session restarts:\n%s\nreport %s", made.text(), path)
    return made, path
