"""Read-only views of a Spark streaming checkpoint (offset log and commit log).

``offsets/N``: line 1 ``v1``, line 2 batch metadata, then one JSON line per source with the batch's end
offsets. ``commits/N`` marks batch N done. Only the last ``minBatchesToRetain`` batches are kept, so the
folders are listed, never assumed to start at 0. ``metadata`` holds the query's id (``{"id": "<uuid>"}``),
written when a new checkpoint first starts and kept for its life.
"""

from __future__ import annotations

import json
from pathlib import Path

OffsetDoc = dict[str, dict[str, int]]
INITIAL_OFFSETS_FILE = "streamwarden_initial_offsets.json"
METADATA_FILE = "metadata"


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


def query_id(checkpoint: Path) -> str | None:
    """The id of the streaming query the checkpoint belongs to, ``None`` before the query first started.

    Every run and replay on the checkpoint shares it; a new checkpoint (also one at the same path) has a new
    one. A ``metadata`` file without a string ``id`` is a ``ValueError``.
    """
    try:
        text = (checkpoint / METADATA_FILE).read_text()
    except FileNotFoundError:
        return None
    document = json.loads(text.splitlines()[0]) if text.strip() else None
    identifier = document.get("id") if isinstance(document, dict) else None
    if not isinstance(identifier, str) or not identifier:
        raise ValueError(f"{checkpoint / METADATA_FILE}: no query id in {text[:200]!r}")
    return identifier
