"""Airflow timetables of the schedules the sibling DAGs' settings hold (:mod:`streamwarden.schedules`), and
the date each scheduled DAG starts from.

With ``catchup=False`` a trigger timetable (Airflow's ``CronTriggerTimetable``, ``DeltaTriggerTimetable``,
and a cron string) fires at once for the latest fire time it finds, but never for one before the DAG's start
date. Under ``streamwarden up`` each run is a new platform (an empty broker, the previous state archived),
and Airflow's database keeps the earlier platforms' runs, so without a start date of this platform's a daily
DAG would fire at start for last midnight, and one every 30 minutes at once (a run before the first batch,
slowing the start). :func:`start_date` therefore starts the schedules when ``up`` started the platform
(:mod:`streamwarden.local.platform_record`): a cron's first run is its first fire after that, a duration's
one period after it. Elsewhere (no record) the DAGs keep :data:`DEFAULT_START`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow.sdk import CronTriggerTimetable, DeltaTriggerTimetable
from airflow.sdk.bases.timetable import BaseTimetable

from streamwarden import schedules
from streamwarden.local.platform_record import read_platform_record
from streamwarden.settings import Settings

DEFAULT_START = datetime(2026, 1, 1, tzinfo=UTC)


def timetable_for(schedule: str) -> BaseTimetable | None:
    """A duration -> every that long; a cron expression or preset -> at its fires (UTC); ``none`` -> None."""
    every = schedules.every(schedule)
    if every is not None:
        return DeltaTriggerTimetable(timedelta(seconds=every))
    expression = schedules.cron(schedule)
    return CronTriggerTimetable(expression, timezone="UTC") if expression else None


def start_date(settings: Settings, timetable: BaseTimetable | None = None) -> datetime:
    """The DAG's start date: when ``up`` started this platform (one period later for a
    ``DeltaTriggerTimetable``, which would otherwise fire at its start date), or :data:`DEFAULT_START`
    outside ``up``. ``timetable``: the DAG's time schedule (the one inside an ``AssetOrTimeSchedule``);
    None for a cron string or no schedule."""
    record = read_platform_record(settings)
    if record is None:
        return DEFAULT_START
    if isinstance(timetable, DeltaTriggerTimetable):
        return record.started + timetable.delta
    return record.started
