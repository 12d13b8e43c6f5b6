"""Airflow timetables of the schedules the sibling DAGs' settings hold (:mod:`streamwarden.schedules`)."""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import CronTriggerTimetable, DeltaTriggerTimetable
from airflow.sdk.bases.timetable import BaseTimetable

from streamwarden import schedules


def timetable_for(schedule: str) -> BaseTimetable | None:
    """A duration -> every that long; a cron expression or preset -> at its fires (UTC); ``none`` -> None."""
    every = schedules.every(schedule)
    if every is not None:
        return DeltaTriggerTimetable(timedelta(seconds=every))
    expression = schedules.cron(schedule)
    return CronTriggerTimetable(expression, timezone="UTC") if expression else None
