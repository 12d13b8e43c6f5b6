"""Settings of output validation (the ``validate_output`` DAG), from ``STREAMWARDEN_VALIDATION_*``.

Kept apart from :mod:`streamwarden.settings` (what the stream needs): only validation reads these.
Invalid values raise :class:`~streamwarden.settings_loading.SettingsError` naming the environment variable.
"""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from streamwarden.schedules import check_schedule
from streamwarden.settings_loading import VALIDATION_ENV_PREFIX, Duration, DurationOrOff, load_sibling_settings

_RANGE_KEY = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*\.)?[A-Za-z_][A-Za-z0-9_]*$")  # column, or table.column
Bound = float | str | None
"""A range's end: a number, an ISO 8601 time (for timestamp columns), or None (open)."""


class ValidationSettings(BaseSettings):
    """What a validation run compares, and when lag becomes a finding."""

    model_config = SettingsConfigDict(env_prefix=VALIDATION_ENV_PREFIX, extra="forbid", frozen=True)

    schedule: str = Field("30m", description="When validate_output runs besides after maintenance: a duration "
                          "(30m: every 30 minutes), a cron expression or preset (@hourly), or none (after "
                          "maintenance and manual runs only).")
    row_key: str = Field("row_id", pattern=r"^[A-Za-z_][A-Za-z0-9_]*(,[A-Za-z_][A-Za-z0-9_]*)*$",
                         description="Columns that, with the offset, identify a row of session_rows (comma-"
                         "separated); a table without them is keyed by all its columns.")
    kafka: bool = Field(True, description="Reconcile with the broker too (checks 3 and 4): log start and end, "
                              "expired offsets, lag.")
    broker_timeout: Duration = Field(10.0, gt=0, description="Longest wait for one broker look-up.")
    stale_after: Duration = Field(900.0, gt=0, description="Unread data in Kafka and no table commit for this long "
                                  "is STALE.")
    audit_hours: int = Field(24, ge=0, le=24 * 31, description="Hours (the newest) of the per-hour audit against "
                                                   "Kafka (check 4); 0 turns it off.")
    max_ranges: int = Field(10, ge=1, le=1000, description="Offset ranges named as evidence per finding.")
    expectations: Path | None = Field(None, description="A file of your own data expectations (JSON, or YAML): a "
                                            "list of {table, expectation, kwargs} added to the built-in suite "
                                            "(docs/validation.md).")
    ranges: Annotated[dict[str, tuple[Bound, Bound]], NoDecode] = Field(
        default_factory=dict, description="Allowed ranges of columns, JSON {\"column\": [min, max]} or "
                              "{\"table.column\": [min, max]}; null for an open end; ISO 8601 times for timestamp "
                              "columns (UTC when no zone is given).")
    freshness: DurationOrOff = Field(
        3600.0, ge=0, description="The newest row of each topic-partition (its event time in session_rows, its "
        "Kafka timestamp in quarantine and records) at most this old, or STALE (none: not checked).")
    content_mib: int = Field(0, ge=0, description="MiB of data files each run hashes against the digests "
                             "recorded at their commits (check 6), each table from where the previous run stopped, "
                             "so every file is checked once every (table size / this) runs; 0: every file, every "
                             "run.")
    batch_rows: int = Field(1_000_000, ge=1, description="Most rows the data expectations hold in memory at "
                            "once: a table's rows to check (those committed since its last validated version) are "
                            "read and validated in batches of files adding up to this many rows.")
    quarantine_share: float = Field(1.0, ge=0, le=1, description="Largest share of a topic-partition's offsets "
                                    "in quarantine, e.g. 0.01 (1%); more is EXPECTATION_FAILED. 1 (the default): "
                                    "shown in the Data Docs, never a finding.")

    @field_validator("schedule")
    @classmethod
    def _schedule(cls, value: str) -> str:
        return check_schedule(value)

    @field_validator("expectations", mode="before")
    @classmethod
    def _expectations(cls, value: Any) -> Any:
        return None if value is None or not str(value).strip() else value

    @field_validator("ranges", mode="before")
    @classmethod
    def _ranges(cls, value: Any) -> dict[str, tuple[Bound, Bound]]:
        return parse_ranges(value)

    @property
    def row_key_columns(self) -> tuple[str, ...]:
        return tuple(self.row_key.split(","))


def parse_ranges(value: Any) -> dict[str, tuple[Bound, Bound]]:
    """``{"column": [min, max]}`` from a mapping or its JSON text, each end a number, an ISO 8601 time or null,
    min not above max; a ``ValueError`` names the bad entry."""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except json.JSONDecodeError as exc:
            raise ValueError(f"not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); expected an "
                             'object such as {"price": [0, 10000]}') from None
    if not isinstance(value, dict):
        raise ValueError('expected an object of column -> [min, max], such as {"price": [0, 10000]}')
    ranges: dict[str, tuple[Bound, Bound]] = {}
    for key, bounds in value.items():
        if not isinstance(key, str) or not _RANGE_KEY.match(key):
            raise ValueError(f"{key!r}: expected a column name, or table.column")
        if not isinstance(bounds, list | tuple) or len(bounds) != 2:
            raise ValueError(f"{key}: expected [min, max] (null for an open end), got {bounds!r}")
        low, high = (_bound(key, b) for b in bounds)
        if low is None and high is None:
            raise ValueError(f"{key}: give a min, a max or both")
        if low is not None and high is not None:
            if isinstance(low, str) != isinstance(high, str):
                raise ValueError(f"{key}: min and max must both be numbers or both be times")
            if _comparable(low) > _comparable(high):
                raise ValueError(f"{key}: min {low!r} is above max {high!r}")
        ranges[key] = (low, high)
    return ranges


def _bound(key: str, bound: Any) -> Bound:
    if bound is None:
        return None
    if isinstance(bound, bool):
        raise ValueError(f"{key}: expected a number, an ISO 8601 time or null, got {bound!r}")
    if isinstance(bound, int | float):
        if not math.isfinite(bound):
            raise ValueError(f"{key}: expected a finite number, got {bound!r}")
        return float(bound)
    if isinstance(bound, str):
        try:
            _comparable(bound)
        except ValueError:
            raise ValueError(f"{key}: {bound!r} is neither a number nor an ISO 8601 time") from None
        return bound
    raise ValueError(f"{key}: expected a number, an ISO 8601 time or null, got {bound!r}")


def _comparable(bound: float | str) -> float:
    if isinstance(bound, str):
        moment = datetime.fromisoformat(bound)  # without a zone: UTC
        return (moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)).timestamp()
    return bound


def load_validation_settings(**overrides: Any) -> ValidationSettings:
    """Validation settings from the environment, raising :class:`SettingsError` naming each bad variable."""
    return load_sibling_settings(ValidationSettings, VALIDATION_ENV_PREFIX, **overrides)
