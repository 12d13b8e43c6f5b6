"""The plugin's FastAPI app without an API server around it: every route refuses a request without a login,
and the plugin registers the app and the navigation entry Airflow expects."""

from __future__ import annotations

import importlib
from pathlib import Path

import airflow.settings  # noqa: F401  (Airflow puts its plugins folder on sys.path)
import pytest
from fastapi.testclient import TestClient

from streamwarden.dashboard.snapshot import DashboardSource, Sources
from streamwarden.maintenance.settings import load_maintenance_settings
from streamwarden.session_restarts.settings import load_restart_settings
from streamwarden.settings import load_settings
from streamwarden.warden.settings import load_warden_settings


@pytest.fixture()
def client(tmp_path: Path) -> TestClient:
    from airflow.api_fastapi.app import create_auth_manager

    from streamwarden_airflow.ui.app import create_app

    create_auth_manager()  # what the API server sets up before it mounts the plugins' apps

    settings = load_settings(home=tmp_path, bootstrap_servers="127.0.0.1:1")
    source = DashboardSource(lambda: Sources(settings, load_warden_settings(broker_timeout=1),
                                             load_restart_settings(), load_maintenance_settings()))
    return TestClient(create_app(source))


@pytest.mark.parametrize("path", ["/", "/?fragment=1", "/api/dashboard", "/metrics", "/data-docs/index.html"])
def test_every_route_refuses_a_request_without_a_login(client: TestClient, path: str) -> None:
    assert client.get(path).status_code == 401
    assert client.get(path, headers={"Authorization": "Bearer not-a-token"}).status_code in (401, 403)
    assert client.get(path, cookies={"_token": ""}).status_code == 401


def test_a_logged_in_user_gets_the_page_the_json_and_the_metrics(client: TestClient, airflow_db: Path) -> None:
    from airflow.api_fastapi.app import create_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    token = create_auth_manager().generate_jwt(SimpleAuthManagerUser(username="admin", role="admin"))
    page = client.get("/", cookies={"_token": token})
    assert page.status_code == 200 and 'data-figure="stream-state" class="bad">stopped<' in page.text
    assert page.headers["cache-control"] == "no-store"
    document = client.get("/api/dashboard", headers={"Authorization": f"Bearer {token}"}).json()
    assert document["stream"]["state"] == "stopped" and document["stream"]["broker_error"]
    metrics = client.get("/metrics", cookies={"_token": token})
    assert metrics.headers["content-type"].startswith("text/plain") and \
        'streamwarden_stream_state{state="stopped"} 1' in metrics.text
    assert client.get("/data-docs/../../etc/passwd", cookies={"_token": token}).status_code == 404
    assert client.get("/data-docs/x.html%00.png", cookies={"_token": token}).status_code == 404


def test_the_plugin_registers_the_app_and_the_navigation_entry() -> None:
    plugin = importlib.import_module("streamwarden_page").StreamwardenPagePlugin
    (app,) = plugin.fastapi_apps
    (view,) = plugin.external_views
    assert app["url_prefix"] == "/streamwarden" and view["href"] == "/streamwarden/"
    assert (view["name"], view["destination"], view["url_route"]) == ("Streamwarden", "nav", "streamwarden")
