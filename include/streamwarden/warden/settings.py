"""Thresholds and alert targets of the warden (the supervisor DAG), from ``STREAMWARDEN_WARDEN_*``.

Kept apart from :mod:`streamwarden.settings` (what the stream itself needs): only the warden reads these.
Invalid values raise :class:`~streamwarden.settings_loading.SettingsError` naming the environment variable.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from streamwarden.settings_loading import WARDEN_ENV_PREFIX, Duration, load_sibling_settings


class WardenSettings(BaseSettings):
    """What the warden judges health by, how it restarts, and whom it calls."""

    model_config = SettingsConfigDict(env_prefix=WARDEN_ENV_PREFIX, extra="forbid", frozen=True)

    heartbeat_floor: Duration = Field(
        30.0, description="Progressing: after its first batch, the stream's heartbeat age <= max(3 x trigger "
        "interval, this floor, 3 x p99 batch duration of the last hour). The p99 follows slow batches by "
        "itself; raise the floor only for a batch far slower than any of the last hour (a sudden backlog).")
    watch_interval: Duration = Field(
        2.0, description="How often the continuous watch (a trigger in Airflow's triggerer) looks at the lease, the "
             "exit document and the heartbeat.")
    startup_grace: Duration = Field(
        240.0, description="A just-launched stream without a heartbeat is STARTING, not HUNG, this long.")
    lag_window: int = Field(10, ge=2, le=1000, description="Lag observations per partition judged by Burrow's rules "
                                               "(OK/WARN/STALL/STOP/ERR; one per supervisor run; UNKNOWN: the broker "
                                               "could not be asked).")
    keepup_ratio: float = Field(0.8, gt=0, le=1, description="Processed/input rows per second below this is "
                                                 "degraded, once the oldest waiting record is older than "
                                                 "batch_overrun triggers (one batch's rates alone are noise).")
    batch_overrun: float = Field(3.0, gt=0, description="A batch longer than this x the trigger interval is degraded "
                                            "while records wait.")
    retention_risk: float = Field(0.5, gt=0, le=1, description="Retention risk when the oldest unprocessed "
                                  "record is older than this fraction of the topic's retention.ms.")
    max_restarts_per_hour: int = Field(3, ge=1, description="Circuit breaker: after this many warden starts within "
                                                "an hour, no automatic restart until a person forces one.")
    backoff_base: Duration = Field(30.0, description="Exponential backoff between restarts: the wait before the 2nd "
                                         "start in an hour, doubled per start.")
    backoff_max: Duration = Field(600.0, description="Longest wait between two automatic starts.")
    drain_timeout: Duration = Field(120.0, description="Graceful stop: how long the drain may take before SIGTERM.")
    term_timeout: Duration = Field(30.0, description="After SIGTERM, how long before SIGKILL.")
    lease_timeout: Duration = Field(180.0, description="A launched stream must take its lease within this.")
    poke_interval: Duration = Field(30.0, description="How often the sensors (wait_for_backoff, upgrade_stream's "
                                          "watch_health) re-check, in reschedule mode (no worker slot held while "
                                          "waiting; under 10 s, Airflow 3.3 can fail a rescheduled task whose "
                                          "previous worker exits late on a busy host).")
    broker_timeout: Duration = Field(10.0, description="Timeout of each broker look-up of a health check.")
    webhook_url: str | None = Field(None, pattern=r"^https?://\S+$",
                                    description="Alerts are POSTed here as JSON when set.")
    email_to: str | None = Field(None, description="Alerts are mailed here (comma-separated) through the Airflow "
                                       "SMTP connection when set.")
    smtp_conn_id: str = Field("smtp_default", description="Airflow connection used for alert e-mail.")
    standby: bool = Field(
        False, description="Keep a warm standby: a second stream process, its Spark session started, that takes "
        "the checkpoint's lease the moment the stream's holder dies (a takeover in seconds instead of a restart). "
        "It costs a second driver's memory (about 1 GiB); `streamwarden up` turns it on when that fits.")
    stream_host_conn_id: str | None = Field(
        None, description="Airflow SSH connection of the stream host: when set, the stream is launched and halted "
        "there (`streamwarden launch` / `halt` over SSH), so no Airflow component is the driver's parent; unset, "
        "on the warden's own host. The host shares the run and checkpoint roots (docs/deployment.md).")

    @model_validator(mode="after")
    def _backoff(self) -> WardenSettings:
        if self.backoff_base > self.backoff_max:
            raise ValueError(f"{WARDEN_ENV_PREFIX}BACKOFF_BASE ({self.backoff_base:g}s) must not exceed "
                             f"{WARDEN_ENV_PREFIX}BACKOFF_MAX ({self.backoff_max:g}s)")
        return self


def load_warden_settings(**overrides: Any) -> WardenSettings:
    """Warden settings from the environment, raising :class:`SettingsError` naming each bad variable."""
    return load_sibling_settings(WardenSettings, WARDEN_ENV_PREFIX, **overrides)
