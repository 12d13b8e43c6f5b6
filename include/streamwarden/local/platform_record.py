"""When the running local platform started: ``<run_root>/platform.json``, written by ``streamwarden up``.

Each ``up`` starts a new platform: its broker is empty and the previous run's state is archived
(:mod:`streamwarden.local.archive`). The DAGs read the record to start their schedules then
(:func:`streamwarden_airflow.timetables.start_date`), so no scheduled run fires for a time before the
platform existed. The record lives in the run root, so it is archived with the run it describes. Outside
``up`` (a production deployment) there is no record and the DAGs keep their fixed start date.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from datetime import datetime

from streamwarden.atomic import read_json, write_json_atomic
from streamwarden.settings import Settings


@dataclass(frozen=True)
class PlatformRecord:
    """The ``up`` process that started the platform, and when (ISO 8601, UTC)."""

    started_at: str
    pid: int

    @property
    def started(self) -> datetime:
        return datetime.fromisoformat(self.started_at)


def write_platform_record(settings: Settings, started: datetime) -> PlatformRecord:
    record = PlatformRecord(started.isoformat(), os.getpid())
    write_json_atomic(settings.run_paths.platform, asdict(record))
    return record


def read_platform_record(settings: Settings) -> PlatformRecord | None:
    """The record, or None without one (no ``up`` on this run root) or when it is unreadable: a DAG must
    still parse, with its fixed start date."""
    try:
        document = read_json(settings.run_paths.platform)
        if document is None:
            return None
        record = PlatformRecord(**document)
        return record if record.started.tzinfo is not None else None
    except (OSError, ValueError, TypeError):
        return None
