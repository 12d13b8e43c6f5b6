"""Check 2: the stream's checkpoint and the tables agree on how far the stream has come (one batch in flight).

The checkpoint's committed position (``offsets/<last commit>``) is read *before* the tables are pinned and
its planned position (``offsets/<last batch>``) *after*: the tables only move forward, so a table at any
moment in between holds, per topic-partition, offsets up to an end ``E`` with
``committed <= E <= planned`` (the batch in flight may be committed to one table, both, or neither).

* ``E < committed``: the checkpoint is past the table. The stream will not read those offsets again: they
  are lost to the table unless someone acts.
* ``E > planned``: the table is past anything the checkpoint planned (the checkpoint was replaced or
  restored). The sink skips offsets a table holds, so nothing is duplicated, but the checkpoint is not the
  one that wrote the table.

A topic-partition the table holds nothing of is compared with where the checkpoint first knew it (the
initial offsets, or the oldest offset-log entry still kept): the stream enters a partition there with an
empty range.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamwarden.runfiles.checkpoint import (
    OffsetDoc,
    commit_batches,
    initial_offsets,
    offset_batches,
    read_offsets,
)
from streamwarden.tables.committed import TopicPartition
from streamwarden.tables.ranges import Interval
from streamwarden.validation.findings import Finding, FindingClass
from streamwarden.validation.snapshot import PinnedTable


@dataclass(frozen=True)
class CheckpointPosition:
    """What the checkpoint says, per topic-partition: committed, planned, and where each partition entered."""

    path: str
    committed_batch: int | None = None
    committed: dict[TopicPartition, int] = field(default_factory=dict)
    planned_batch: int | None = None
    planned: dict[TopicPartition, int] = field(default_factory=dict)
    entered: dict[TopicPartition, int] = field(default_factory=dict)

    @property
    def exists(self) -> bool:
        return self.committed_batch is not None

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "committed_batch": self.committed_batch, "planned_batch": self.planned_batch,
                "committed": _as_doc(self.committed), "planned": _as_doc(self.planned)}


def read_committed(checkpoint: Path) -> CheckpointPosition:
    """The committed position (read it before pinning the tables)."""
    commits = commit_batches(checkpoint)
    if not commits:
        return CheckpointPosition(str(checkpoint))
    return CheckpointPosition(str(checkpoint), commits[-1], _flat(read_offsets(checkpoint, commits[-1])))


def with_planned(position: CheckpointPosition) -> CheckpointPosition:
    """``position`` with the planned position and where each partition entered (read after pinning)."""
    if not position.exists:
        return position
    checkpoint = Path(position.path)
    batches = offset_batches(checkpoint)
    planned_batch = batches[-1] if batches else position.committed_batch
    planned = _flat(read_offsets(checkpoint, planned_batch)) if planned_batch is not None else {}
    entered: dict[TopicPartition, int] = {}
    first_docs = [initial_offsets(checkpoint)] if batches and batches[0] == 0 else []
    for doc in [*first_docs, *(read_offsets(checkpoint, b) for b in batches)]:
        for tp, offset in _flat(doc).items():
            entered.setdefault(tp, offset)
    return CheckpointPosition(position.path, position.committed_batch, position.committed, planned_batch,
                              {**position.committed, **planned}, entered)


def check_checkpoint(position: CheckpointPosition, tables: Sequence[PinnedTable], absent: Sequence[str] = ()
                     ) -> list[Finding]:
    """Check 2 for every topic-partition the checkpoint has committed (``absent``: tables of the pipeline
    that do not exist, though the checkpoint may say they should hold offsets)."""
    if not position.exists:
        return []
    findings: list[Finding] = []
    for name in absent:
        for tp, committed in sorted(position.committed.items()):
            start = position.entered.get(tp)
            if start is not None and committed > start:
                findings.append(_behind(name, tp, (start, committed), "does not exist"))
    for table in tables:
        claims = table.claims(position.committed)
        for tp, committed in sorted(position.committed.items()):
            intervals = claims.get(tp, [])
            planned = max(position.planned.get(tp, committed), committed)
            end = intervals[-1][1] if intervals else None
            if end is None:
                start = position.entered.get(tp)
                if start is not None and committed > start:
                    findings.append(_behind(table.name, tp, (start, committed), "holds no offset of it"))
            elif end < committed:
                findings.append(_behind(table.name, tp, (end, committed), f"holds offsets up to {end}"))
            elif end > planned:
                findings.append(Finding(
                    FindingClass.CHECKPOINT_MISMATCH, table.name, tp[0], tp[1], ((planned, end),), end - planned,
                    f"the table holds offsets up to {end}, past anything the checkpoint planned ({planned}, batch "
                    f"{position.planned_batch}): the checkpoint is not the one that wrote the table"))
    return findings


def _behind(table: str, tp: TopicPartition, missing: Interval, holds: str) -> Finding:
    return Finding(FindingClass.CHECKPOINT_MISMATCH, table, tp[0], tp[1], (missing,), missing[1] - missing[0],
                   f"the checkpoint has committed {tp[0]}[{tp[1]}] up to {missing[1]} but the table {holds}: "
                   f"the stream will not read [{missing[0]}, {missing[1]}) again")


def _flat(doc: OffsetDoc | None) -> dict[TopicPartition, int]:
    return {(topic, int(partition)): int(offset) for topic, parts in (doc or {}).items()
            for partition, offset in parts.items()}


def _as_doc(offsets: dict[TopicPartition, int]) -> dict[str, dict[str, int]]:
    doc: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        doc.setdefault(topic, {})[str(partition)] = offset
    return doc
