"""Clean-up of a table: vacuum the files no kept version references, checkpoint the log, drop old log files.

``vacuum`` runs in *full* mode: besides the files compaction replaced, it deletes files no version ever
referenced (those of micro-batches that crashed before their commit, or of a compaction killed before
its commit) once they are older than the retention. A file the stream has written but not yet committed
is seconds old, so a retention of at least an hour never touches it; a shorter (forced) retention is for
drills with the stream stopped. delta-rs takes the retention in whole hours: it is rounded up, and a
forced retention under an hour is 0 (every file the newest version does not reference).

Before the log's clean-up deletes old commit files, their content hashes are folded into the table's hash
manifest (:func:`~streamwarden.tables.content.fold_manifest`).

Vacuum is refused while a compaction is unproven (a journal is pending): its removed files are the
evidence the proof reads.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from streamwarden.failures import IntegrityError
from streamwarden.maintenance.compaction import Journal
from streamwarden.maintenance.settings import HOUR
from streamwarden.tables.content import fold_manifest
from streamwarden.tables.location import TableLocation


@dataclass(frozen=True)
class Cleanup:
    """What clean-up did to one table (or, in a dry run, would do)."""

    table: str
    files_deleted: int
    retention_hours: int
    checkpoint_version: int | None
    seconds: float
    dry_run: bool

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def text(self) -> str:
        """One line for a person."""
        checkpoint = "" if self.checkpoint_version is None else f", log checkpoint at version {self.checkpoint_version}"
        return (f"{self.table}: vacuum {'would delete' if self.dry_run else 'deleted'} {self.files_deleted:,} files "
                f"(retention {self.retention_hours} h){checkpoint}")


def clean_table(location: TableLocation, folder: Path, *, retention_seconds: float, dry_run: bool) -> Cleanup:
    """Vacuum ``location`` keeping ``retention_seconds`` of history; then checkpoint and clean the log."""
    started = time.monotonic()
    if Journal.path(folder, location.name).exists():
        raise IntegrityError(f"table {location.name}: a compaction is not proven yet "
                             f"({Journal.path(folder, location.name)}); vacuum would delete its evidence. "
                             "Run maintain_tables again: it proves pending compactions first.",
                             details={"table": location.name})
    table = location.open()
    hours = math.ceil(retention_seconds / HOUR) if retention_seconds >= HOUR else 0
    deleted = table.vacuum(retention_hours=hours, dry_run=dry_run, enforce_retention_duration=False, full=True)
    checkpoint = None
    if not dry_run:
        table.update_incremental()
        table.create_checkpoint()
        # the commits' content hashes go with the log files the clean-up deletes: keep them first
        fold_manifest(location, table.version())
        table.cleanup_metadata()
        checkpoint = table.version()
    return Cleanup(location.name, len(deleted), hours, checkpoint, time.monotonic() - started, dry_run)
