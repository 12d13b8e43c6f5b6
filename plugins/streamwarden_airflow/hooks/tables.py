"""The output tables seen from Airflow: their settings, maintenance settings, and the alert channel."""

from __future__ import annotations

from functools import cached_property

from airflow.sdk import Asset, BaseHook

from streamwarden.alerts import Alert
from streamwarden.maintenance.settings import MaintenanceSettings, load_maintenance_settings
from streamwarden.session_restarts.settings import RestartSettings, load_restart_settings
from streamwarden.settings import Settings, load_settings
from streamwarden.tables.location import TableLocation
from streamwarden.validation.settings import ValidationSettings, load_validation_settings
from streamwarden_airflow.hooks.stream import StreamwardenHook


class DeltaTablesHook(BaseHook):
    """Settings of the stream's Delta tables (``STREAMWARDEN_*``), of their maintenance
    (``STREAMWARDEN_MAINTENANCE_*``), validation (``STREAMWARDEN_VALIDATION_*``) and the session restarts that
    bound what they can lose (``STREAMWARDEN_SESSION_RESTART_*``), their assets; alerts go where the warden's
    go (log, webhook, e-mail)."""

    hook_name = "Streamwarden Delta tables"

    def __init__(self) -> None:
        super().__init__()
        self.settings: Settings = load_settings()
        self.maintenance: MaintenanceSettings = load_maintenance_settings()

    @cached_property
    def restarts(self) -> RestartSettings:
        """``STREAMWARDEN_SESSION_RESTART_*`` (read when first asked: a bad one fails restart_sessions only)."""
        return load_restart_settings()

    @cached_property
    def validation(self) -> ValidationSettings:
        """``STREAMWARDEN_VALIDATION_*`` (read when first asked: a bad one fails validation, not maintenance)."""
        return load_validation_settings()

    def location(self, table: str) -> TableLocation:
        return TableLocation.of(self.settings, table)

    def asset(self, table: str) -> Asset:
        """The Airflow asset of an output table (``streamwarden.<table>``, the table's URI): maintenance emits
        its events, validate_output is scheduled on it."""
        uri = self.location(table).uri
        return Asset(name=f"streamwarden.{table}", uri=uri if "://" in uri else f"file://{uri}", group="streamwarden")

    def send_alert(self, alert: Alert) -> dict[str, str]:
        return StreamwardenHook().send_alert(alert)

    def send_alert_once(self, alert: Alert) -> bool:
        return StreamwardenHook().send_alert_once(alert)
