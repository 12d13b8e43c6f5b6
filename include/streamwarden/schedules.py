"""When a DAG beside the stream runs: a duration (``30m``), a cron expression or preset (``@hourly``), or ``none``.

The settings of the sibling DAGs (validation, session restarts) hold their schedule as text checked by
:func:`check_schedule`; the DAG files turn it into a timetable, and :func:`interval` says how long one
run may be from the next (what the exposure of a session restart schedule is measured against).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from itertools import pairwise

from croniter import croniter  # type: ignore[import-untyped]

from streamwarden.settings_loading import parse_duration

CRON_PRESETS = {"@hourly": "0 * * * *", "@daily": "0 0 * * *", "@weekly": "0 0 * * 0", "@monthly": "0 0 1 * *"}
_CRON = re.compile(r"^\S+(\s+\S+){4}$")  # five fields
_FIRES_CHECKED = 60


def check_schedule(value: str) -> str:
    """``value`` stripped when it is a schedule, else ``ValueError`` listing the forms allowed."""
    value = value.strip()
    if value.lower() == "none":
        return value
    if value in CRON_PRESETS or _CRON.match(value):
        if not croniter.is_valid(CRON_PRESETS.get(value, value)):
            raise ValueError(f"{value!r} is not a valid cron expression (minute hour day month weekday)")
        return value
    try:
        parse_duration(value)
    except ValueError:
        raise ValueError("expected a duration (30m), a cron expression (*/30 * * * *), a preset "
                         f"({', '.join(CRON_PRESETS)}) or none") from None
    return value


def cron(schedule: str) -> str | None:
    """The cron expression when the schedule is one (a preset translated), else None."""
    return CRON_PRESETS.get(schedule) or (schedule if _CRON.match(schedule) else None)


def every(schedule: str) -> float | None:
    """Seconds between runs when the schedule is a duration, else None."""
    if schedule.lower() == "none" or cron(schedule) is not None:
        return None
    return parse_duration(schedule)


def interval(schedule: str, now: datetime | None = None) -> float | None:
    """The longest time between two runs (seconds): the duration, or the widest gap between a cron's next
    fires (``0 9 * * 1-5`` -> the weekend); None for ``none``."""
    expression = cron(schedule)
    if expression is None:
        return every(schedule)
    fires = croniter(expression, now or datetime.now(UTC))
    times: list[float] = [float(fires.get_next(float)) for _ in range(_FIRES_CHECKED)]
    return max(later - earlier for earlier, later in pairwise(times))
