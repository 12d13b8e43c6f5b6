"""The output tables seen from Airflow: their settings, maintenance settings, and the alert channel."""

from __future__ import annotations

from airflow.sdk import BaseHook

from streamwarden.maintenance.settings import MaintenanceSettings, load_maintenance_settings
from streamwarden.settings import Settings, load_settings
from streamwarden.tables.location import TableLocation
from streamwarden.warden.alerts import Alert
from streamwarden_airflow.hooks.stream import StreamwardenHook


class DeltaTablesHook(BaseHook):
    """Settings of the stream's Delta tables (``STREAMWARDEN_*``) and of their maintenance
    (``STREAMWARDEN_MAINTENANCE_*``); alerts go where the warden's go (log, webhook, e-mail)."""

    hook_name = "Streamwarden Delta tables"

    def __init__(self) -> None:
        super().__init__()
        self.settings: Settings = load_settings()
        self.maintenance: MaintenanceSettings = load_maintenance_settings()

    def location(self, table: str) -> TableLocation:
        return TableLocation.of(self.settings, table)

    def send_alert(self, alert: Alert) -> dict[str, str]:
        return StreamwardenHook().send_alert(alert)
