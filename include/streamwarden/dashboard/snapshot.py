"""One look at everything the page shows (:func:`snapshot`), and a source that caches it for a few seconds.

The health verdict asks the broker, and a table's summary reads its rows' topic and partition columns, so
:class:`DashboardSource` keeps a snapshot for ``ttl`` seconds, and each table's summary, the sites' sessions and
the Delta history for as long as the tables' versions stay the same, and at least ``heavy_ttl`` seconds.
A section that cannot be read is left out and named in ``errors``; the others are still shown.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from streamwarden.alerts import read_alerts
from streamwarden.dashboard.alerts_now import alerts_now
from streamwarden.dashboard.model import Dashboard, Series, Sites, StreamNow, TableNow
from streamwarden.dashboard.series import MAX_COMMITS, series
from streamwarden.dashboard.sites_now import measure, sites_now
from streamwarden.dashboard.stream_now import stream_now
from streamwarden.dashboard.tables_now import summaries, tables_now
from streamwarden.maintenance.settings import MaintenanceSettings
from streamwarden.secrets import scrub
from streamwarden.session_restarts.sessions import SiteSessions
from streamwarden.session_restarts.settings import RestartSettings
from streamwarden.settings import Settings
from streamwarden.tables.location import SESSION_ROWS, TableLocation, pipeline_tables
from streamwarden.tables.reading import TableSummary, summarize
from streamwarden.warden.health import assess
from streamwarden.warden.lag_history import read_lag_history
from streamwarden.warden.launcher import running_holder
from streamwarden.warden.settings import WardenSettings

T = TypeVar("T")


@dataclass(frozen=True)
class Sources:
    """The settings a snapshot reads by (the stream's, with the active release's over them, and its siblings')."""

    settings: Settings
    warden: WardenSettings
    restarts: RestartSettings
    maintenance: MaintenanceSettings


@dataclass
class _Memo:
    """What reads a table's rows or its whole history, kept by the versions it was read at: read again when a
    version changed, but at most every ``heavy_ttl`` seconds (a running stream commits every few seconds, and a
    scan of a large table each time would load the host for a page)."""

    heavy_ttl: float = 0.0
    kept: dict[str, tuple[object, float, Any]] = field(default_factory=dict)

    def get(self, name: str, key: object, now: float, read: Callable[[], T]) -> T:
        found = self.kept.get(name)
        if found is not None and (found[0] == key or now - found[1] < self.heavy_ttl):
            value: T = found[2]
            return value
        value = read()
        self.kept[name] = (key, now, value)
        return value


def _section(errors: dict[str, str], name: str, read: Callable[[], T]) -> T | None:
    try:
        return read()
    except Exception as exc:  # one unreadable section must not hide the others
        errors[name] = scrub(f"{type(exc).__name__}: {exc}")[:500]
        return None


def last_recovery(settings: Settings) -> dict[str, Any] | None:
    """The last line of ``run/recoveries.jsonl`` (the last recovery that changed the tables), or None."""
    path = settings.run_paths.recoveries_log
    try:
        lines = [line for line in path.read_text().splitlines() if line.strip()]
    except FileNotFoundError:
        return None
    document: dict[str, Any] | None = json.loads(lines[-1]) if lines else None
    return document


def snapshot(sources: Sources, now: float | None = None, memo: _Memo | None = None,
             summarizer: Callable[[Settings, str], TableSummary] = summarize, hours: float = 3.0) -> Dashboard:
    """Everything the page shows, read now. Nothing is written (the verdict is not committed)."""
    now = time.time() if now is None else now
    memo = _Memo() if memo is None else memo
    settings = sources.settings
    errors: dict[str, str] = {}
    moment = datetime.fromtimestamp(now, UTC)

    def stream() -> tuple[StreamNow, int | None]:
        holder = running_holder(settings)
        verdict = assess(settings, sources.warden, now).verdict  # read-only: never commit() from the page
        return stream_now(verdict, holder, now), verdict.lag.total_lag if verdict.lag.measured else None

    def cached_summary(s: Settings, name: str) -> TableSummary:
        table = TableLocation.of(s, name).open_or_none()
        return memo.get(f"summary:{name}", None if table is None else table.version(), now,
                        lambda: summarizer(s, name))

    found_stream = _section(errors, "stream", stream)
    found_tables = _section(errors, "tables", lambda: summaries(settings, cached_summary)) or {}
    tables: list[TableNow] = _section(errors, "tables", lambda: tables_now(
        settings, found_tables, small_file_bytes=sources.maintenance.small_file_bytes,
        min_files=sources.maintenance.min_files)) or []

    def sites() -> Sites:
        versions = {name: s.head.version for name, s in found_tables.items() if s.head is not None}
        measured: dict[str, SiteSessions] = {}
        if SESSION_ROWS in versions:
            measured = memo.get("sites", tuple(sorted(versions.items())), now,
                                lambda: measure(settings, versions, moment))
        return sites_now(settings, found_tables, measured, sources.restarts, moment)

    found_sites = _section(errors, "sites", sites)
    alerts = _section(errors, "alerts", lambda: alerts_now(read_alerts(settings.run_paths.alerts))) or []

    def chart() -> Series:
        first = TableLocation.of(settings, pipeline_tables(settings)[0]).open_or_none()
        history: list[dict[str, Any]] = [] if first is None else memo.get(
            "history", first.version(), now, lambda: list(first.history(limit=MAX_COMMITS)))
        return series(history, read_lag_history(settings), now, hours,
                      current_lag=None if found_stream is None else found_stream[1])

    return Dashboard(
        generated_at=moment.isoformat(), stream=None if found_stream is None else found_stream[0],
        sites=found_sites, tables=tables, alerts=alerts, series=_section(errors, "series", chart) or Series(),
        last_recovery=_section(errors, "recoveries", lambda: last_recovery(settings)), errors=errors)


class DashboardSource:
    """Snapshots for a server: one per ``ttl`` seconds at most, whoever asks (thread-safe); the tables' rows,
    the sites' sessions and the Delta history read again at most every ``heavy_ttl`` seconds."""

    def __init__(self, load: Callable[[], Sources], ttl: float = 5.0, heavy_ttl: float = 30.0) -> None:
        self._load = load
        self.ttl = ttl
        self._lock = threading.Lock()
        self._memo = _Memo(heavy_ttl)
        self._last: tuple[float, Dashboard] | None = None

    def get(self) -> Dashboard:
        with self._lock:
            now = time.time()
            if self._last is None or now - self._last[0] >= self.ttl:
                self._last = (now, snapshot(self._load(), now, self._memo))
            return self._last[1]
