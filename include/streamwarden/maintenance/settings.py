"""Settings of table maintenance (the ``maintain_tables`` DAG), from ``STREAMWARDEN_MAINTENANCE_*``.

Kept apart from :mod:`streamwarden.settings` (what the stream needs): only maintenance reads these.
Invalid values raise :class:`~streamwarden.settings_loading.SettingsError` naming the environment variable.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from streamwarden.settings_loading import MAINTENANCE_ENV_PREFIX, Duration, load_sibling_settings

MiB = 2**20
HOUR = 3600.0
MIN_RETENTION = HOUR
"""Vacuum never keeps less history than this unless forced: a reader of an older version loses its files."""


class MaintenanceSettings(BaseSettings):
    """When maintenance runs, what it compacts, and how much history it keeps."""

    model_config = SettingsConfigDict(env_prefix=MAINTENANCE_ENV_PREFIX, extra="forbid", frozen=True)

    schedule: str = Field("@hourly", min_length=1, description="When maintain_tables runs: a cron expression "
                          "or a preset such as @hourly; 'none' for manual runs only.")
    target_file_size: int = Field(128 * MiB, ge=MiB, description="Bytes a compacted file aims at.")
    small_file_ratio: float = Field(0.75, gt=0, le=1, description="A file is small below this fraction of the target "
                                                      "size (planning; delta-rs then rewrites every file of a chosen "
                                                      "partition below the target).")
    min_files: int = Field(5, ge=2, description="A partition is compacted when it has at least this many small "
                           "files.")
    retention: Duration = Field(7 * 24 * HOUR, description="Vacuum deletes files no table version of the last this "
                                               "long references (and files no version ever referenced, older than "
                                               "this); rounded up to whole hours.")
    recovery_window: Duration = Field(24 * HOUR, description="How far back recover_stream may roll a table; "
                                      "retention must not be shorter.")
    force_short_retention: bool = Field(False, description="Allow a retention under one hour (drills, with the "
                                               "stream stopped).")

    @model_validator(mode="after")
    def _retention(self) -> MaintenanceSettings:
        prefix = MAINTENANCE_ENV_PREFIX
        if self.retention < self.recovery_window:
            raise ValueError(f"{prefix}RETENTION ({self.retention:g}s) must not be shorter than "
                             f"{prefix}RECOVERY_WINDOW ({self.recovery_window:g}s): recovery needs the files of "
                             "the versions it may roll back to")
        if self.retention < MIN_RETENTION and not self.force_short_retention:
            raise ValueError(f"{prefix}RETENTION ({self.retention:g}s) is under one hour: a reader of a version "
                             f"that old would lose its files; set {prefix}FORCE_SHORT_RETENTION=true to allow it")
        return self

    @property
    def small_file_bytes(self) -> int:
        """Files below this many bytes count as small."""
        return int(self.target_file_size * self.small_file_ratio)


def load_maintenance_settings(**overrides: Any) -> MaintenanceSettings:
    """Maintenance settings from the environment, raising :class:`SettingsError` naming each bad variable."""
    return load_sibling_settings(MaintenanceSettings, MAINTENANCE_ENV_PREFIX, **overrides)
