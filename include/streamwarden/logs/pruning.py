"""Deleting the logs past their bounds: old launch logs, and rolled-over files past the count or the age."""

from __future__ import annotations

import time
from pathlib import Path

from streamwarden.logs.bounds import LAUNCH_LOG, ROLLED_LOG, LogBounds


def prune_logs(bounds: LogBounds, now: float | None = None) -> list[Path]:
    """Delete, under the logs folder, and return what was deleted:

    - launch logs (``stream-<time>.log``) beyond the newest ``backups``, or last written over ``max_age`` ago,
      except the newest one (it may belong to the running stream);
    - rolled-over files (``<name>.log.<n>``) numbered beyond ``backups`` or last written over ``max_age`` ago.

    A live log (``<name>.log``) is never deleted: a process may still be writing it.
    """
    now = time.time() if now is None else now
    try:
        files = [path for path in bounds.folder.iterdir() if path.is_file()]
    except FileNotFoundError:
        return []
    launches = sorted((p for p in files if LAUNCH_LOG.match(p.name)), key=lambda p: p.name, reverse=True)
    doomed = [p for i, p in enumerate(launches) if i > 0 and (i >= bounds.backups or _older(p, bounds, now))]
    for path in files:
        rolled = ROLLED_LOG.match(path.name)
        if rolled and (int(rolled["index"]) > bounds.backups or _older(path, bounds, now)):
            doomed.append(path)
    deleted = []
    for path in doomed:
        try:
            path.unlink()
        except FileNotFoundError:
            continue  # a rollover or another pruning got there first
        deleted.append(path)
    return deleted


def _older(path: Path, bounds: LogBounds, now: float) -> bool:
    try:
        return now - path.stat().st_mtime > bounds.max_age
    except FileNotFoundError:
        return False
