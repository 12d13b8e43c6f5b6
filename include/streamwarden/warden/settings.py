"""Thresholds and alert targets of the warden (the supervisor DAG), from ``STREAMWARDEN_WARDEN_*``.

Kept apart from :mod:`streamwarden.settings` (what the stream itself needs): only the warden reads these.
Invalid values raise :class:`~streamwarden.settings.SettingsError` naming the environment variable.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from streamwarden.settings import (
    WARDEN_ENV_PREFIX,
    load_sibling_settings,
    parse_duration,
)


class WardenSettings(BaseSettings):
    """What the warden judges health by, how it restarts, and whom it calls."""

    model_config = SettingsConfigDict(env_prefix=WARDEN_ENV_PREFIX, extra="forbid", frozen=True)

    heartbeat_floor: float = Field(
        30.0, description="Progressing: after its first batch, the stream's heartbeat age <= max(3 x trigger "
        "interval, this floor, 3 x p99 batch duration of the last hour). The p99 follows slow batches by "
        "itself; raise the floor only for a batch far slower than any of the last hour (a sudden backlog).")
    watch_interval: float = Field(
        2.0, description="The continuous watch (a trigger in Airflow's triggerer) looks at the lease, the "
        "exit document and the heartbeat this often.")
    startup_grace: float = Field(
        240.0, description="A just-launched stream without a heartbeat is STARTING, not HUNG, this long.")
    lag_window: int = Field(10, ge=2, le=1000, description="Lag observations per partition judged by "
                            "Burrow's rules (one per supervisor run).")
    keepup_ratio: float = Field(0.8, gt=0, le=1, description="Keeping up: processed rate >= ratio x input rate "
                                "while records wait longer than batch_overrun triggers.")
    batch_overrun: float = Field(3.0, gt=0, description="Keeping up: batch duration <= overrun x trigger "
                                 "interval while records wait.")
    retention_risk: float = Field(0.5, gt=0, le=1, description="Retention risk when the oldest unprocessed "
                                  "record is older than this fraction of the topic's retention.ms.")
    max_restarts_per_hour: int = Field(3, ge=1, description="Circuit breaker: this many warden starts "
                                       "within an hour stop automatic restarts.")
    backoff_base: float = Field(30.0, description="Wait before the 2nd start in an hour; doubles per start.")
    backoff_max: float = Field(600.0, description="Longest wait between two automatic starts.")
    drain_timeout: float = Field(120.0, description="Graceful stop: how long the drain may take.")
    term_timeout: float = Field(30.0, description="After SIGTERM, how long before SIGKILL.")
    lease_timeout: float = Field(180.0, description="A launched stream must take its lease within this.")
    poke_interval: float = Field(30.0, description="Sensors (wait_for_backoff, upgrade_stream's watch_health) "
                                 "re-check this often, in reschedule mode (no worker slot held while waiting).")
    broker_timeout: float = Field(10.0, description="Timeout of each broker request made by a health check.")
    webhook_url: str | None = Field(None, pattern=r"^https?://\S+$",
                                    description="Alerts are POSTed here as JSON when set.")
    email_to: str | None = Field(None, description="Alerts are mailed here (comma-separated) through the "
                                 "Airflow SMTP connection when set.")
    smtp_conn_id: str = Field("smtp_default", description="Airflow connection used for alert e-mail.")

    @model_validator(mode="after")
    def _backoff(self) -> WardenSettings:
        if self.backoff_base > self.backoff_max:
            raise ValueError(f"{WARDEN_ENV_PREFIX}BACKOFF_BASE ({self.backoff_base:g}s) must not exceed "
                             f"{WARDEN_ENV_PREFIX}BACKOFF_MAX ({self.backoff_max:g}s)")
        return self

    @field_validator("heartbeat_floor", "watch_interval", "startup_grace", "backoff_base", "backoff_max",
                     "drain_timeout", "term_timeout", "lease_timeout", "poke_interval", "broker_timeout", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return parse_duration(value)


def load_warden_settings(**overrides: Any) -> WardenSettings:
    """Warden settings from the environment, raising :class:`SettingsError` naming each bad variable."""
    return load_sibling_settings(WardenSettings, WARDEN_ENV_PREFIX, **overrides)
