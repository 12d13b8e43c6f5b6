"""Settings of session restarts (the ``restart_sessions`` DAG), from ``STREAMWARDEN_SESSION_RESTART_*``.

Invalid values raise :class:`~streamwarden.settings_loading.SettingsError` naming the environment variable.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from streamwarden import schedules
from streamwarden.settings_loading import RESTART_ENV_PREFIX, Duration, DurationOrOff, load_sibling_settings


class RestartSettings(BaseSettings):
    """When sites are asked to restart their sessions, how the asks are spread, and how long they have."""

    model_config = SettingsConfigDict(env_prefix=RESTART_ENV_PREFIX, extra="forbid", frozen=True)

    schedule: str = Field("@daily", description="When every site is asked to restart its sessions: a cron "
                          "expression or preset (@daily), a duration (6h), or none (manual runs only). The "
                          "data a broken session can lose is bounded by this interval.")
    jitter: DurationOrOff = Field(
        300.0, ge=0, description="The turns of the sites are spread evenly over this window, in an order shuffled "
                     "per run; keep it above (sites x trigger interval) so two sites' snapshots rarely share a "
                     "micro-batch (0: all at once).")
    deadline: Duration = Field(
        600.0, gt=0, description="After its turn, a site has this long to have its new session in the output "
        "table; later, it is alerted.")
    poke_interval: Duration = Field(
        30.0, gt=0, description="How often the output table is asked for the new sessions (no worker slot is "
        "held in between).")
    catch_up: DurationOrOff = Field(
        600.0, ge=0, description="After the last deadline, how long the sensor keeps waiting while the stream has "
                     "not read a silent site's topic up to its deadline (an answer is in the table only once the "
                     "stream read it; a running stream is seconds behind, a stopped one is started by the warden); "
                     "then the report tells the stream's part (0: not at all).")
    exposure_factor: float = Field(1.5, gt=1, description="A site whose last clean session start is older than this "
                                              "many restart intervals is alerted (exposure).")

    @field_validator("schedule")
    @classmethod
    def _schedule(cls, value: str) -> str:
        return schedules.check_schedule(value)

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
