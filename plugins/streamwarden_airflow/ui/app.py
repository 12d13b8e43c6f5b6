"""The Streamwarden page's FastAPI app, mounted by the API server under ``/streamwarden`` (``streamwarden_page``).

Routes, each refused (401/403) without an Airflow login (the API server's JWT, from the ``_token`` cookie the
UI's login sets or an ``Authorization: Bearer`` header), as the core API refuses it:

* ``GET /``: the page (``?fragment=1``: its body only, what the page's script refetches);
* ``GET /api/dashboard``: the same figures as JSON;
* ``GET /metrics``: the key figures as Prometheus text;
* ``GET /data-docs/{path}``: the Great Expectations Data Docs site of ``run/data_docs/``.

Thin: everything shown comes from :mod:`streamwarden.dashboard`, read-only, cached a few seconds.
"""

from __future__ import annotations

from typing import Any

from airflow.api_fastapi.auth.managers.models.resource_details import AccessView
from airflow.api_fastapi.core_api.security import requires_access_view
from fastapi import Depends, FastAPI, HTTPException
from fastapi.responses import FileResponse, HTMLResponse, PlainTextResponse

from streamwarden.dashboard import page, prometheus
from streamwarden.dashboard.snapshot import DashboardSource, Sources
from streamwarden.dashboard.tables_now import data_docs_file
from streamwarden.maintenance.settings import load_maintenance_settings
from streamwarden.session_restarts.settings import load_restart_settings
from streamwarden.upgrade.release import load_release_settings
from streamwarden.warden.settings import load_warden_settings

NO_STORE = {"Cache-Control": "no-store"}


def load_sources() -> Sources:
    """The settings the hooks use (the active release's over the environment's), read at every snapshot."""
    return Sources(load_release_settings(), load_warden_settings(), load_restart_settings(),
                   load_maintenance_settings())


def create_app(source: DashboardSource | None = None) -> FastAPI:
    """The app; ``source`` defaults to one reading this environment's settings (snapshots kept 5 s)."""
    dashboards = source or DashboardSource(load_sources, ttl=5.0)
    app = FastAPI(title="Streamwarden", docs_url=None, redoc_url=None, openapi_url=None,
                  dependencies=[Depends(requires_access_view(AccessView.WEBSITE))])

    @app.get("/", response_class=HTMLResponse)
    def show(fragment: bool = False) -> HTMLResponse:
        dashboard = dashboards.get()
        body = page.fragment(dashboard) if fragment else page.page(dashboard)
        return HTMLResponse(body, headers=NO_STORE)

    @app.get("/api/dashboard")
    def dashboard_json() -> dict[str, Any]:
        return dashboards.get().to_json()

    @app.get("/metrics", response_class=PlainTextResponse)
    def metrics() -> PlainTextResponse:
        return PlainTextResponse(prometheus.render(dashboards.get()), headers=NO_STORE,
                                 media_type="text/plain; version=0.0.4")

    @app.get("/data-docs/{path:path}")
    def data_docs(path: str) -> FileResponse:
        found = data_docs_file(load_sources().settings, path)
        if found is None:
            raise HTTPException(404, "no such Data Docs page")
        return FileResponse(found)

    return app
