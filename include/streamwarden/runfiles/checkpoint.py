"""Read-only views of a Spark streaming checkpoint (offset log and commit log).

``offsets/N``: line 1 ``v1``, line 2 batch metadata, then one JSON line per source with the batch's end
offsets. ``commits/N`` marks batch N done. Only the last ``minBatchesToRetain`` batches are kept, so the
folders are listed, never assumed to start at 0.
"""

from __future__ import annotations

import json
from pathlib import Path

OffsetDoc = dict[str, dict[str, int]]
INITIAL_OFFSETS_FILE = "streamwarden_initial_offsets.json"


def _batch_ids(folder: Path) -> list[int]:
    if not folder.is_dir():
        return []
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())


def offset_batches(checkpoint: Path) -> list[int]:
    """Batch ids present in the offset log (planned batches)."""
    return _batch_ids(checkpoint / "offsets")


def commit_batches(checkpoint: Path) -> list[int]:
    """Batch ids present in the commit log (finished batches)."""
    return _batch_ids(checkpoint / "commits")


def read_offsets(checkpoint: Path, batch_id: int, source_index: int = 0) -> OffsetDoc | None:
    """End offsets of ``batch_id`` for one source, ``None`` when that batch is not in the log."""
    path = checkpoint / "offsets" / str(batch_id)
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return None
    line = lines[2 + source_index]
    if line in {"-", ""}:
        return None
    document: OffsetDoc = json.loads(line)
    return document


def initial_offsets(checkpoint: Path) -> OffsetDoc | None:
    """The offsets batch 0 started from, as persisted by the source."""
    path = checkpoint / INITIAL_OFFSETS_FILE
    try:
        document: OffsetDoc = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    return document


def batch_start_offsets(checkpoint: Path, batch_id: int) -> OffsetDoc | None:
    """Where ``batch_id`` started: the previous batch's end, or the initial offsets for the first batch."""
    previous = [b for b in offset_batches(checkpoint) if b < batch_id]
    if previous:
        return read_offsets(checkpoint, previous[-1])
    return initial_offsets(checkpoint)


def committed_offsets(checkpoint: Path) -> OffsetDoc | None:
    """The position the query has durably passed: ``offsets/max(commits)``."""
    commits = commit_batches(checkpoint)
    return read_offsets(checkpoint, commits[-1]) if commits else None
