"""Crash-safe file writes: a reader sees the old content or the new one, never a torn file."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temp file in the same folder, fsync, then rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def write_json_atomic(path: Path, document: Any) -> None:
    """Serialise ``document`` as indented, key-sorted JSON and write it atomically."""
    write_bytes_atomic(path, (json.dumps(document, indent=2, sort_keys=True, default=str) + "\n").encode())


def read_json(path: Path) -> Any:
    """Read a JSON document; ``None`` when the file does not exist."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


def fsync_dir(folder: Path) -> None:
    """Make a rename or create inside ``folder`` durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
