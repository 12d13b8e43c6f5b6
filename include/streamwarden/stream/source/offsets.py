"""Offset documents of the Kafka source, and admission control.

An offset document is ``{topic: {partition: offset}}`` with partitions as strings (it is JSON in the
checkpoint). Spark compares offsets as JSON text, so every document is built in canonical order:
topics sorted, partitions sorted numerically.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from streamwarden.kafka.admin import TopicPartitionId
from streamwarden.runfiles.checkpoint import OffsetDoc

Positions = dict[TopicPartitionId, int]
T = TypeVar("T")


def to_doc(positions: Mapping[TopicPartitionId, int]) -> OffsetDoc:
    """Canonical offset document from positions."""
    doc: OffsetDoc = {}
    for tp in sorted(positions):
        doc.setdefault(tp.topic, {})[str(tp.partition)] = int(positions[tp])
    return doc


def from_doc(doc: Mapping[str, Mapping[str, int]] | None) -> Positions:
    """Positions from an offset document (``None`` means no positions)."""
    if not doc:
        return {}
    return {TopicPartitionId(topic, int(part)): int(offset)
            for topic, parts in doc.items() for part, offset in parts.items()}


def spread_limit(start: Positions, latest: Positions, max_rows: int) -> Positions:
    """End positions reading at most ``max_rows`` records in all, shared fairly between partitions.

    Water-filling: every partition with a backlog gets an equal share of what is left; a partition
    whose backlog is smaller than its share leaves the rest to the others. Deterministic.
    """
    backlog = {tp: max(0, latest[tp] - start.get(tp, latest[tp])) for tp in latest}
    granted = dict.fromkeys(latest, 0)
    active = sorted(tp for tp, n in backlog.items() if n > 0)
    remaining = max_rows
    while remaining > 0 and active:
        share = max(1, remaining // len(active))
        still_active = []
        for tp in active:
            take = min(share, backlog[tp] - granted[tp], remaining)
            granted[tp] += take
            remaining -= take
            if granted[tp] < backlog[tp]:
                still_active.append(tp)
            if remaining == 0:
                break
        active = still_active
    return {tp: start.get(tp, latest[tp]) + granted[tp] if latest[tp] >= start.get(tp, latest[tp]) else latest[tp]
            for tp in latest}


def pack(items: Sequence[T], size: Callable[[T], int], bins: int) -> list[list[T]]:
    """Spread ``items`` over at most ``bins`` lists of about equal total ``size`` (largest first, each to
    the lightest list; ties keep the input order). ``bins <= 0``: one list per item. Deterministic."""
    if bins <= 0 or len(items) <= bins:
        return [[item] for item in items]
    packed: list[list[T]] = [[] for _ in range(bins)]
    loads = [0] * bins
    for item in sorted(items, key=size, reverse=True):
        lightest = loads.index(min(loads))
        packed[lightest].append(item)
        loads[lightest] += size(item)
    return packed
