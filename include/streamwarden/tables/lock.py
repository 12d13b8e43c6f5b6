"""One maintainer per table at a time: an exclusive lock file under the run root, taken by maintenance and by a
recovery's restore.

Two concurrent compactions of the same files both commit (delta-rs sees no conflict between two
data-change-free rewrites) and the table then holds every row twice; the lock rules that out between
maintenance runs (a scheduled run and a manual one, or the DAG and ``streamwarden maintain``), and keeps a
compaction from rewriting a table a recovery is restoring. It is an
``flock``: released by the kernel when the holder dies, so a killed run never leaves it stale.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from streamwarden.failures import EnvironmentFailure


class TableBusyError(EnvironmentFailure):
    """Another maintenance run holds the table."""


@contextmanager
def table_lock(folder: Path, table: str) -> Iterator[None]:
    """Hold the maintenance lock of ``table`` (in ``folder``) for the block; fail at once when held."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{table}.lock"
    handle = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(handle, 64, 0).decode(errors="replace").strip() or "unknown"
            raise TableBusyError(f"table {table}: another maintenance run (pid {holder}) holds {path}; wait for "
                                 "it to finish (maintain_tables runs one at a time)",
                                 details={"table": table, "lock": str(path)}) from None
        os.ftruncate(handle, 0)
        os.pwrite(handle, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(handle)
