"""Check 5, exposure: how long each site has gone without a clean session start, against the restart schedule.

A break in a site's data (a gap under ``STREAMWARDEN_ON_GAP=resync``) is repaired only by a new session of
that site. Per site, the age of the clean start of its oldest open session
(:mod:`streamwarden.session_restarts.sessions`) is how long a break could have gone unrepaired; above
``STREAMWARDEN_SESSION_RESTART_EXPOSURE_FACTOR`` times the restart interval it is an ``EXPOSURE`` finding (a
warning), whose next action is ``restart_sessions``.
Without a restart schedule the figures are reported and nothing is judged.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import duckdb

from streamwarden.durations import duration_text
from streamwarden.session_restarts.sessions import SESSION_COLUMNS, SiteSessions, measure_sites
from streamwarden.session_restarts.settings import RestartSettings
from streamwarden.tables.location import QUARANTINE, SESSION_ROWS
from streamwarden.validation.findings import Finding, FindingClass
from streamwarden.validation.snapshot import PinnedTable


@dataclass(frozen=True)
class Exposure:
    """Every site's sessions, the limit they were judged against (None: no schedule), and the findings."""

    sites: tuple[SiteSessions, ...] = ()
    limit: float | None = None
    findings: tuple[Finding, ...] = ()
    note: str | None = None


def check_exposure(con: duckdb.DuckDBPyConnection, tables: list[PinnedTable], restarts: RestartSettings, *,
                   now: datetime, session_timeout: float) -> Exposure:
    """The sites' exposure at the pinned versions of ``session_rows`` and ``quarantine``."""
    pinned = {t.name: t for t in tables}
    if SESSION_ROWS not in pinned:
        return Exposure(note="no session_rows table (records pipeline, or before the first batch): check 5 skipped")
    missing = sorted(set(SESSION_COLUMNS) - set(pinned[SESSION_ROWS].columns()))
    if missing:
        return Exposure(note=f"session_rows has no {', '.join(missing)} (written before session boundaries were "
                        "recorded): check 5 skipped")
    dead = pinned[QUARANTINE].dataset() if QUARANTINE in pinned else None
    sites = measure_sites(con, pinned[SESSION_ROWS].dataset(), dead, now=now, session_timeout=session_timeout)
    limit = restarts.exposure_limit
    if limit is None:
        return Exposure(tuple(sites.values()), None, (), "STREAMWARDEN_SESSION_RESTART_SCHEDULE=none: exposure "
                        "reported, not judged")
    findings = []
    for site in sites.values():
        exposure = site.exposure(now)
        if exposure is not None and exposure > limit and site.last_clean_start is not None:
            findings.append(Finding(
                FindingClass.EXPOSURE, SESSION_ROWS, site.site, -1, (), site.open_sessions,
                f"last clean session start {site.last_clean_start.isoformat()}, {duration_text(exposure)} ago: over "
                f"the limit of {duration_text(limit)} ({restarts.exposure_factor:g} x the restart interval); "
                f"{site.open_sessions} open session(s), {site.damaged_sessions} damaged"))
    return Exposure(tuple(sites.values()), limit, tuple(findings))
