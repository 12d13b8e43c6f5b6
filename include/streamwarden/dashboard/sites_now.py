"""Per site: its sessions' clean starts and exposure (:mod:`streamwarden.session_restarts.sessions`, the measure
``validate_output`` and ``restart_sessions`` use) against the restart interval, its quarantine share, and the
last ``restart_sessions`` run (``run/session_restarts/``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from streamwarden.atomic import read_json
from streamwarden.dashboard.model import SiteNow, Sites
from streamwarden.session_restarts.reach import Cause
from streamwarden.session_restarts.sessions import SESSION_COLUMNS, SiteSessions, measure_sites
from streamwarden.session_restarts.settings import RestartSettings
from streamwarden.settings import Settings
from streamwarden.tables.location import QUARANTINE, SESSION_ROWS, TableLocation
from streamwarden.tables.reading import TableSummary, dataset
from streamwarden.tables.sql import bounded_connection


def measure(settings: Settings, versions: dict[str, int], now: datetime) -> dict[str, SiteSessions]:
    """Every site's sessions at the given versions of ``session_rows`` (and ``quarantine`` when it exists)."""
    rows_location = TableLocation.of(settings, SESSION_ROWS)
    rows = dataset(rows_location.open(versions[SESSION_ROWS]), rows_location)
    if not set(SESSION_COLUMNS) <= set(rows.schema.names):
        return {}
    dead = None
    if QUARANTINE in versions:
        dead_location = TableLocation.of(settings, QUARANTINE)
        dead = dataset(dead_location.open(versions[QUARANTINE]), dead_location)
    with bounded_connection(settings.run_paths.spill) as con:
        return measure_sites(con, rows, dead, now=now, session_timeout=settings.session_timeout)


def last_restart_run(settings: Settings) -> dict[str, Any] | None:
    """The newest ``restart_sessions`` report, in short: when, passed, answered sites, sites that did not answer
    (``unanswered``) and sites whose answer the stream did not read (``unread``: it was not running, or behind)."""
    folder = settings.run_paths.session_restarts
    reports = sorted(folder.glob("*.json")) if folder.is_dir() else []
    if not reports:
        return None
    document = read_json(reports[-1]) or {}
    missing = document.get("unanswered", [])
    unread = sorted(t["site"] for t in missing if Cause(t.get("cause", Cause.SITE_SILENT)).stream)
    return {"checked_at": document.get("checked_at"), "passed": document.get("passed"),
            "answered": sorted(a["site"] for a in document.get("answers", {}).values()),
            "unanswered": sorted(t["site"] for t in missing if t["site"] not in unread), "unread": unread,
            "report": reports[-1].name}


def sites_now(settings: Settings, found_tables: dict[str, TableSummary], measured: dict[str, SiteSessions],
              restarts: RestartSettings, now: datetime) -> Sites:
    """The section from the tables' summaries (rows per topic) and the sessions measured."""
    rows: dict[str, int] = {}
    dead: dict[str, int] = {}
    for name, counts in ((SESSION_ROWS, rows), (QUARANTINE, dead)):
        summary = found_tables.get(name)
        for p in summary.partitions if summary is not None else ():
            counts[p.topic] = counts.get(p.topic, 0) + p.rows
    limit = restarts.exposure_limit
    sites = []
    for site in sorted(set(rows) | set(dead) | set(measured)):
        sessions = measured.get(site)
        exposure = sessions.exposure(now) if sessions else None
        total = rows.get(site, 0) + dead.get(site, 0)
        sites.append(SiteNow(
            site=site, last_clean_start=_iso(sessions.last_clean_start if sessions else None),
            newest_clean_start=_iso(sessions.newest_clean_start if sessions else None),
            open_sessions=sessions.open_sessions if sessions else 0,
            damaged_sessions=sessions.damaged_sessions if sessions else 0,
            exposure_s=None if exposure is None else round(exposure, 1),
            over_limit=limit is not None and exposure is not None and exposure > limit,
            rows=rows.get(site, 0), quarantined=dead.get(site, 0),
            quarantine_share=None if total == 0 else round(dead.get(site, 0) / total, 6)))
    note = None if SESSION_ROWS in found_tables else "records pipeline: no sessions"
    return Sites(restarts.interval, limit, sites, last_restart_run(settings), note)


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()
