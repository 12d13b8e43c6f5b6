"""Disk per area of the platform's home: what each of the stream, the tables, the logs and Airflow keeps.

Bytes are the blocks a file holds on disk (``du``'s measure, not its length), summed per area. One walk of
the home (and of any root the settings put outside it) per sample: a few thousand files after hours of
3-second batches, some tens of milliseconds.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from streamwarden.settings import Settings

AREAS: dict[str, str] = {
    "data-files": "the tables' Parquet files (<output>/<table>/...)",
    "delta-log": "the tables' Delta logs (<output>/<table>/_delta_log)",
    "checkpoint": "the Spark checkpoint without its state: offsets, commits, sources, the lease",
    "checkpoint-state": "the state store's files in the checkpoint (<checkpoint>/<query>/state)",
    "state": "the local state-store scratch space and Spark's local folder (<home>/state)",
    "logs": "<run>/logs: the stream's, broker's, producer's and Airflow's logs (bounded by the log settings)",
    "run-files": "the rest of <run>: heartbeat, warden, maintenance, validation and restart reports, alerts",
    "airflow-db": "Airflow's SQLite database (<home>/airflow/airflow.db*)",
    "airflow-logs": "Airflow's task and component logs (<home>/airflow/logs)",
    "airflow-other": "the rest of the Airflow home",
    "archive": "<home>/archive: what `up` archived of earlier runs",
    "other": "anything else under the home",
}


class DiskAreas:
    """Where each area lies for one platform's settings."""

    def __init__(self, settings: Settings) -> None:
        self.home = settings.home
        self.output = settings.root("output")
        self.checkpoint = settings.root("checkpoint")
        self.state = settings.root("state")
        self.run = settings.root("run")
        self.airflow = settings.home_paths.airflow
        self.archive = settings.home_paths.archive
        roots = [self.output, self.checkpoint, self.state, self.run]
        self.walked = [self.home, *(root for root in roots if not root.is_relative_to(self.home))]

    def area(self, path: Path) -> str:
        """The area of one file (most specific root first: the run root may lie inside the home, and so on)."""
        if path.is_relative_to(self.output):
            return "delta-log" if "_delta_log" in path.relative_to(self.output).parts else "data-files"
        if path.is_relative_to(self.checkpoint):
            parts = path.relative_to(self.checkpoint).parts
            return "checkpoint-state" if len(parts) > 1 and parts[1] == "state" else "checkpoint"
        if path.is_relative_to(self.state):
            return "state"
        if path.is_relative_to(self.run):
            return "logs" if path.relative_to(self.run).parts[:1] == ("logs",) else "run-files"
        if path.is_relative_to(self.archive):
            return "archive"
        if path.is_relative_to(self.airflow):
            relative = path.relative_to(self.airflow)
            if relative.parts[:1] == ("logs",):
                return "airflow-logs"
            return "airflow-db" if relative.name.startswith("airflow.db") else "airflow-other"
        return "other"

    def measure(self) -> dict[str, int]:
        """Bytes on disk per area (every area named, zero when empty)."""
        totals = dict.fromkeys(AREAS, 0)
        for top in self.walked:
            for path, blocks in _files(top):
                totals[self.area(path)] += blocks * 512
        return totals

    def free_bytes(self) -> int:
        return shutil.disk_usage(self.home).free


def _files(top: Path) -> list[tuple[Path, int]]:
    """Every regular file under ``top`` (symlinks not followed) and its allocated 512-byte blocks; files that
    vanish while walked (a rolled log, a vacuumed file) are left out."""
    found: list[tuple[Path, int]] = []
    pending = [top]
    while pending:
        folder = pending.pop()
        try:
            entries = list(os.scandir(folder))
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    pending.append(Path(entry.path))
                elif entry.is_file(follow_symlinks=False):
                    found.append((Path(entry.path), entry.stat(follow_symlinks=False).st_blocks))
            except FileNotFoundError:
                continue
    return found
