"""Registers the Streamwarden page with Airflow: its FastAPI app under ``/streamwarden`` and a "Streamwarden"
entry in the UI's navigation (an external view shown inside the UI).

A top-level module of the plugins folder, so that Airflow's plugin manager finds the ``AirflowPlugin``
(``streamwarden_airflow/`` is ignored by the plugin scan; see ``.airflowignore``).
"""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin

from streamwarden_airflow.ui.app import create_app


class StreamwardenPagePlugin(AirflowPlugin):
    """The Streamwarden page: the stream's health at a glance."""

    name = "streamwarden_page"
    fastapi_apps: list[Any] = [{"app": create_app(), "url_prefix": "/streamwarden", "name": "Streamwarden"}]
    external_views: list[Any] = [{"name": "Streamwarden", "href": "/streamwarden/", "destination": "nav",
                                  "url_route": "streamwarden"}]
