"""No scheduled run fires for a time before ``streamwarden up`` started the platform: each scheduled DAG file,
parsed with the platform's record in its home, asked for its first run the way Airflow's scheduler asks
(the DAG's timetable, start date and catchup, no earlier run)."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from pathlib import Path
from typing import Any

import pytest

from fixtures import REPO
from streamwarden.local.platform_record import write_platform_record
from streamwarden.settings import load_settings


def _dag(dag_id: str) -> Any:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags" / f"{dag_id}.py"))
    assert bag.import_errors == {}
    return bag.dags[dag_id]


def _first_run(dag: Any) -> datetime:
    """When the scheduler would create the DAG's first scheduled run (no run of it yet in the database)."""
    from airflow.serialization.encoders import coerce_to_core_timetable
    from airflow.timetables.base import TimeRestriction

    restriction = TimeRestriction(earliest=dag.start_date, latest=None, catchup=dag.catchup)
    info = coerce_to_core_timetable(dag.timetable).next_dagrun_info(last_automated_data_interval=None,
                                                                    restriction=restriction)
    assert info is not None
    run_after: datetime = info.run_after
    return run_after


@pytest.fixture()
def started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> datetime:
    """A platform started now, as ``up`` records it in the home the DAG files read."""
    monkeypatch.setenv("STREAMWARDEN_HOME", str(tmp_path / "home"))
    return write_platform_record(load_settings(), datetime.now(UTC)).started


def test_each_schedule_starts_after_the_platform_did(started: datetime) -> None:
    next_midnight = datetime.combine(started.date() + timedelta(days=1), time(0), UTC)
    next_hour = started.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    next_even_minute = started.replace(minute=started.minute - started.minute % 2, second=0, microsecond=0) + \
        timedelta(minutes=2)

    firsts = {dag_id: _first_run(_dag(dag_id))
              for dag_id in ("restart_sessions", "maintain_tables", "validate_output", "stream_supervisor")}

    assert firsts == {"restart_sessions": next_midnight, "maintain_tables": next_hour,
                      "validate_output": started + timedelta(minutes=30), "stream_supervisor": next_even_minute}


def test_without_the_record_a_daily_dag_would_fire_at_once_for_last_midnight(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the platform's start date prevents (and what a deployment without ``up`` still does)."""
    monkeypatch.setenv("STREAMWARDEN_HOME", str(tmp_path / "home"))
    now = datetime.now(UTC)

    first = _first_run(_dag("restart_sessions"))

    assert first == datetime.combine(now.date(), time(0), UTC) < now
