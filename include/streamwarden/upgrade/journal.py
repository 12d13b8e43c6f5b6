"""The journal of one upgrade run: what each step did, so that a step re-run after a kill -9 finishes its work
instead of doing it twice, and the rollback knows what to undo.

``<run_root>/upgrades/<key>/journal.json``, one JSON document rewritten atomically after each change; each
step writes its entry once its work is done (and, where a step moves something, its intent before). The
entries: ``hold`` (the stream held, whether it was running), ``rollback_point`` (the checkpoint copy, each
table's Delta version, the release in force), ``evolved`` (columns added), ``activated``, ``started`` (pid,
time, last committed batch), ``watched`` (the verdict), ``rollback`` (its steps), ``outcome``.

Example::

    >>> journal = Journal.open(settings, "manual__2026-11-24T12:00:00")
    >>> journal.put("hold", {"was_running": True})
    >>> Journal.open(settings, "manual__2026-11-24T12:00:00").get("hold")
    {'was_running': True}
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from streamwarden.atomic import read_json, write_json_atomic
from streamwarden.settings import Settings

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def run_key(run_id: str) -> str:
    """A DAG run id as a folder name: ``manual__2026-11-24T12:00:00+00:00`` ->
    ``manual__2026-11-24T12-00-00-00-00``."""
    return _UNSAFE.sub("-", run_id).strip("-.")[:120] or "run"


@dataclass
class Journal:
    """One run's journal, read at open; :meth:`put` writes an entry through at once."""

    path: Path
    key: str
    document: dict[str, Any]

    @classmethod
    def open(cls, settings: Settings, key: str) -> Journal:
        path = settings.run_paths.upgrades / key / "journal.json"
        document = read_json(path) or {"key": key, "created_at": datetime.now(UTC).isoformat(timespec="seconds")}
        return cls(path, key, document)

    @property
    def stamp(self) -> str:
        """The run's creation time as a folder-name prefix (``20261124T120000``)."""
        return datetime.fromisoformat(self.document["created_at"]).strftime("%Y%m%dT%H%M%S")

    def get(self, entry: str) -> Any:
        return self.document.get(entry)

    def put(self, entry: str, value: Any) -> None:
        self.document[entry] = value
        write_json_atomic(self.path, self.document)
