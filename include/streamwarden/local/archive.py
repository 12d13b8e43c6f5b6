"""The previous run's state moved aside when ``streamwarden up`` starts: ``<home>/archive/<UTC time>/``.

``up``'s broker keeps its data in memory, so every ``up`` starts with an empty broker. A checkpoint, tables
or run files left by an earlier run describe offsets that broker no longer has: the stream would fail with
DATA_LOSS, the warden's restart history could hold the circuit breaker open, and ``up`` would take the old
tables' batches for new ones. So the four state roots (checkpoint, output, state-store scratch, run files:
heartbeat, failure document, restart history, alerts, hold, reports, last validated versions, logs) move,
as one unit, into one dated folder, with ``archived.json`` saying where each came from. Nothing is deleted
but archives older than the newest :data:`KEEP`. The Airflow home (database, admin password) and the
operator's releases stay where they are.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal

from streamwarden.atomic import write_json_atomic
from streamwarden.failures import ConfigError
from streamwarden.settings import Settings
from streamwarden.tables.location import TABLES, TableLocation

KEEP = 3
"""Archives kept (the newest); older ones are deleted when a new one is made."""
ROOTS: tuple[Literal["checkpoint", "output", "state", "run"], ...] = ("checkpoint", "output", "state", "run")


@dataclass(frozen=True)
class Archived:
    """Where the previous run's state went, what moved, and the older archives deleted to keep :data:`KEEP`."""

    folder: Path
    moved: tuple[str, ...]
    deleted: tuple[Path, ...]

    def describe(self) -> str:
        older = f"; deleted {len(self.deleted)} older" if self.deleted else ""
        return (f"archived the previous run's {', '.join(self.moved)} to {self.folder} "
                f"(the newest {KEEP} archives are kept{older})")


def archive_previous_state(settings: Settings, now: datetime) -> Archived | None:
    """Move every state root that holds something into ``<home>/archive/<now>/<root>``; None when none does.

    A ``ConfigError`` when the output root is an object store holding tables: they cannot be moved aside,
    and a stream reading the new, empty broker would find their offsets already committed.
    """
    _refuse_remote_tables(settings)
    roots = {name: settings.root(name) for name in ROOTS if _local(settings, name)}
    for name, path in roots.items():
        if settings.home_paths.archive.is_relative_to(path):
            raise ConfigError(f"STREAMWARDEN_{name.upper()}_ROOT {path} contains {settings.home_paths.archive}: "
                              "`streamwarden up` archives each root there; give the root a folder of its own")
    present = {name: path for name, path in roots.items() if path.is_dir() and any(path.iterdir())}
    if not present:
        return None
    folder = _new_folder(settings.home_paths.archive, now)
    for name, path in present.items():
        shutil.move(path, folder / name)  # a rename on one filesystem; a copy, then delete, across two
    write_json_atomic(folder / "archived.json", {"archived_at": now.isoformat(),
                                                 "from": {name: str(path) for name, path in present.items()}})
    return Archived(folder, tuple(present), tuple(_prune(settings.home_paths.archive)))


def _local(settings: Settings, name: str) -> bool:
    return name != "output" or isinstance(settings.output_location, Path)


def _refuse_remote_tables(settings: Settings) -> None:
    location = settings.output_location
    if isinstance(location, Path):
        return
    held = [name for name in TABLES if TableLocation.of(settings, name).open_or_none() is not None]
    if held:
        raise ConfigError(f"the output root {location} holds the tables {', '.join(held)} of an earlier run, and "
                          "`streamwarden up` cannot archive an object store: its broker starts empty, so the "
                          "stream would find these offsets committed already. Move or delete them, or give "
                          "STREAMWARDEN_OUTPUT_ROOT a new folder, then start `up` again")


def _new_folder(root: Path, now: datetime) -> Path:
    """``<root>/<UTC time>``, made owner-only; a suffix when two ``up`` start within the same second."""
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    for attempt in range(100):
        folder = root / (stamp if attempt == 0 else f"{stamp}-{attempt}")
        try:
            folder.mkdir(mode=0o700)
            return folder
        except FileExistsError:
            continue
    raise FileExistsError(f"{root / stamp} and 99 more with a suffix exist already")


def _prune(root: Path) -> list[Path]:
    """Delete all but the newest :data:`KEEP` archives (their names sort by time)."""
    archives = sorted(path for path in root.iterdir() if path.is_dir())
    old = archives[:-KEEP]
    for path in old:
        shutil.rmtree(path)
    return old
