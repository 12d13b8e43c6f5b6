"""Settings of session restarts (the ``restart_sessions`` DAG), from ``STREAMWARDEN_SESSION_RESTART_*``.

Invalid values raise :class:`~streamwarden.settings.SettingsError` naming the environment variable.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from streamwarden import schedules
from streamwarden.settings import RESTART_ENV_PREFIX, load_sibling_settings, parse_duration


class RestartSettings(BaseSettings):
    """When sites are asked to restart their sessions, how the asks are spread, and how long they have."""

    model_config = SettingsConfigDict(env_prefix=RESTART_ENV_PREFIX, extra="forbid", frozen=True)

    schedule: str = Field("@daily", description="When every site is asked to restart its sessions: a cron "
                          "expression or preset (@daily), a duration (6h), or none (manual runs only). The "
                          "data a broken session can lose is bounded by this interval.")
    jitter: float = Field(300.0, ge=0, description="The sites' restarts are spread evenly over this window, so "
                          "their snapshots do not land in one micro-batch (0: all at once).")
    deadline: float = Field(600.0, gt=0, description="After its turn, a site has this long to have its new "
                            "session in the output table; later, it is alerted.")
    poke_interval: float = Field(30.0, gt=0, description="How often the output table is asked for the new "
                                 "sessions (no worker slot is held in between).")
    catch_up: float = Field(600.0, ge=0, description="After the last deadline, how long the sensor waits for the "
                            "stream to read the sites' topics up to their deadlines when it had not (an answer is "
                            "in the table only once the stream read it); then the report tells the stream's part.")
    exposure_factor: float = Field(1.5, gt=1, description="A site whose last clean session start is older than "
                                   "this many restart intervals is alerted (exposure).")

    @field_validator("schedule")
    @classmethod
    def _schedule(cls, value: str) -> str:
        return schedules.check_schedule(value)

    @field_validator("jitter", mode="before")
    @classmethod
    def _jitter(cls, value: Any) -> float:
        return 0.0 if str(value).strip() in ("0", "0s", "none") else parse_duration(value)

    @field_validator("deadline", "poke_interval", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return parse_duration(value)

    @field_validator("catch_up", mode="before")
    @classmethod
    def _catch_up(cls, value: Any) -> float:
        return 0.0 if str(value).strip() in ("0", "0s") else parse_duration(value)

    @property
    def interval(self) -> float | None:
        """Seconds between scheduled restarts (the widest gap of a cron schedule); None without a schedule."""
        return schedules.interval(self.schedule)

    @property
    def exposure_limit(self) -> float | None:
        """The exposure above which a site is alerted, in seconds; None without a schedule."""
        interval = self.interval
        return None if interval is None else interval * self.exposure_factor


def load_restart_settings(**overrides: Any) -> RestartSettings:
    """Restart settings from the environment, raising :class:`SettingsError` naming each bad variable."""
    return load_sibling_settings(RestartSettings, RESTART_ENV_PREFIX, **overrides)
