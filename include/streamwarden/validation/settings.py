"""Settings of output validation (the coming ``validate_output`` DAG), from ``STREAMWARDEN_VALIDATION_*``.

Kept apart from :mod:`streamwarden.settings` (what the stream needs): only validation reads these.
Invalid values raise :class:`~streamwarden.settings.SettingsError` naming the environment variable.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from streamwarden.settings import VALIDATION_ENV_PREFIX, load_sibling_settings, parse_duration

CRON_PRESETS = {"@hourly": "0 * * * *", "@daily": "0 0 * * *", "@weekly": "0 0 * * 0", "@monthly": "0 0 1 * *"}
_CRON = re.compile(r"^\S+(\s+\S+){4}$")  # five fields; Airflow checks each when it parses the DAG


class ValidationSettings(BaseSettings):
    """What a validation run compares, and when lag becomes a finding."""

    model_config = SettingsConfigDict(env_prefix=VALIDATION_ENV_PREFIX, extra="forbid", frozen=True)

    schedule: str = Field("30m", description="When validate_output runs besides after maintenance: a duration "
                          "(30m: every 30 minutes), a cron expression or preset (@hourly), or none (after "
                          "maintenance and manual runs only).")
    row_key: str = Field("row_id", pattern=r"^[A-Za-z_][A-Za-z0-9_]*(,[A-Za-z_][A-Za-z0-9_]*)*$",
                         description="Columns that, with the offset, identify a row of session_rows (comma-"
                         "separated); a table without them is keyed by all its columns.")
    kafka: bool = Field(True, description="Reconcile with the broker too: log start and end, expired offsets, lag.")
    broker_timeout: float = Field(10.0, gt=0, description="Longest wait for one broker look-up.")
    stale_after: float = Field(900.0, gt=0, description="Unread data in Kafka and no table commit for this long "
                               "is STALE.")
    audit_hours: int = Field(24, ge=0, le=24 * 31, description="Hours (the newest) of the per-hour audit against "
                             "Kafka; 0 turns it off.")
    max_ranges: int = Field(10, ge=1, le=1000, description="Offset ranges named as evidence per finding.")

    @field_validator("schedule")
    @classmethod
    def _schedule(cls, value: str) -> str:
        value = value.strip()
        if value.lower() == "none" or value in CRON_PRESETS or _CRON.match(value):
            return value
        try:
            parse_duration(value)
        except ValueError:
            raise ValueError("expected a duration (30m), a cron expression (*/30 * * * *), a preset "
                             f"({', '.join(CRON_PRESETS)}) or none") from None
        return value

    @property
    def schedule_every(self) -> float | None:
        """Seconds between runs when the schedule is a duration, else None."""
        if self.schedule.lower() == "none" or self.schedule_cron is not None:
            return None
        return parse_duration(self.schedule)

    @property
    def schedule_cron(self) -> str | None:
        """The cron expression when the schedule is one (a preset translated), else None."""
        return CRON_PRESETS.get(self.schedule) or (self.schedule if _CRON.match(self.schedule) else None)

    @field_validator("broker_timeout", "stale_after", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return parse_duration(value)

    @property
    def row_key_columns(self) -> tuple[str, ...]:
        return tuple(self.row_key.split(","))


def load_validation_settings(**overrides: Any) -> ValidationSettings:
    """Validation settings from the environment, raising :class:`SettingsError` naming each bad variable."""
    return load_sibling_settings(ValidationSettings, VALIDATION_ENV_PREFIX, **overrides)
