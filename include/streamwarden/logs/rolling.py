"""Size rollover of a log that another process appends to (the platform's broker, producer and Airflow)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from streamwarden.logs.bounds import LogBounds


def roll_if_full(path: Path, bounds: LogBounds) -> bool:
    """When ``path`` holds ``max_bytes`` or more: shift ``path.N`` to ``path.N+1`` (the oldest beyond
    ``backups`` is dropped), copy ``path`` to ``path.1`` and truncate it; True when it rolled over.

    The writer must have opened the file for appending (``O_APPEND``, as ``open(path, "ab")`` does): its
    next write then lands at the new end. Lines written between the copy and the truncation are lost.
    """
    try:
        if path.stat().st_size < bounds.max_bytes:
            return False
    except FileNotFoundError:
        return False
    path.with_name(f"{path.name}.{bounds.backups}").unlink(missing_ok=True)
    for index in range(bounds.backups - 1, 0, -1):
        older = path.with_name(f"{path.name}.{index}")
        if older.exists():
            older.replace(path.with_name(f"{path.name}.{index + 1}"))
    fd = os.open(path.with_name(f"{path.name}.1"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with open(path, "rb") as source, os.fdopen(fd, "wb") as target:
        shutil.copyfileobj(source, target)
    os.truncate(path, 0)
    return True
