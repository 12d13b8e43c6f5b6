"""A clean start of Airflow under ``streamwarden up``: nothing of Streamwarden runs until Airflow can run it.

``airflow standalone`` starts its scheduler beside its API server. A task the scheduler starts before the
API server's execution API answers cannot report to it: it fails with "connection refused" or is killed,
and its run shows red. Airflow's database outlives ``up`` (it keeps the user's login), so it also holds
the previous platform's runs, some unfinished, and its DAGs as they were, unpaused. ``up`` therefore:

1. pauses every Streamwarden DAG in the database before Airflow starts (:func:`pause_in_database`; new
   DAGs are created paused, Airflow's default);
2. once the execution API answers, waits until the DAG processor has parsed every DAG file again
   (:func:`parsed_since`): the DAGs then start their schedules when this platform started
   (:mod:`streamwarden.local.platform_record`), so no scheduled run fires for an earlier time;
3. ends the previous platform's unfinished runs and drops the asset events it queued
   (:func:`end_previous_runs`): their tables and run files are archived, a sensor resumed on the new
   platform would wait for what will never come, and an event (a maintenance run's) would start a run for
   tables that are gone;
4. unpauses the Streamwarden DAGs.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from streamwarden.local.airflow_api import TAG, AirflowApi


def pause_in_database(database: Path) -> int:
    """Pause every DAG tagged :data:`~streamwarden.local.airflow_api.TAG` in Airflow's SQLite database (its
    ``dag`` table's ``is_paused``, the flag the UI and the REST API set); how many were unpaused.

    Done on the file because nothing of Airflow runs yet: the API that pauses DAGs starts together with the
    scheduler that would run them. No database yet (a first start) or no DAG table: nothing to pause.
    """
    if not database.is_file():
        return 0
    with sqlite3.connect(database, timeout=60) as connection:
        try:
            cursor = connection.execute(
                "UPDATE dag SET is_paused = 1 WHERE is_paused = 0 "
                "AND dag_id IN (SELECT dag_id FROM dag_tag WHERE name = ?)", (TAG,))
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return 0
            raise
        return cursor.rowcount


@dataclass(frozen=True)
class Parsing:
    """Which DAG files the DAG processor has not parsed since a time, and the import errors it found since."""

    waiting: tuple[str, ...]
    import_errors: tuple[str, ...]

    @property
    def done(self) -> bool:
        return not self.waiting


def parsed_since(api: AirflowApi, dags_folder: Path, since: datetime) -> Parsing:
    """Whether every ``*.py`` in ``dags_folder`` was parsed at or after ``since``: into DAGs, or into an
    import error."""
    files = {path.name for path in dags_folder.glob("*.py")}
    parsed = {Path(dag["fileloc"]).name for dag in api.dags()
              if dag.get("last_parsed_time") and datetime.fromisoformat(dag["last_parsed_time"]) >= since}
    failed = {Path(error["filename"]).name: f"{error['filename']}: {error.get('stack_trace')}"
              for error in api.import_error_list() if datetime.fromisoformat(error["timestamp"]) >= since}
    return Parsing(tuple(sorted(files - parsed - failed.keys())),
                   tuple(failed[name] for name in sorted(failed) if name in files))


def end_previous_runs(api: AirflowApi, started: datetime, note: str) -> list[str]:
    """Mark every queued or running run of a Streamwarden DAG failed, with ``note``, and drop the asset events
    queued for them before ``started``; ``dag_id/run_id`` of each run ended.

    Called while those DAGs are paused, before this platform triggers anything: such runs and events are the
    previous platform's, interrupted when it stopped.
    """
    ours = sorted(dag["dag_id"] for dag in api.dags(tag=TAG))
    ended = []
    for run in (run for run in api.unfinished_runs() if run["dag_id"] in ours):
        api.fail_run(run["dag_id"], run["dag_run_id"], note)
        ended.append(f"{run['dag_id']}/{run['dag_run_id']}")
    for dag_id in ours:
        api.drop_queued_asset_events(dag_id, started)
    return ended
