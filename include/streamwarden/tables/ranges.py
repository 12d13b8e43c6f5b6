"""Pure interval arithmetic on Kafka offset ranges.

Every interval is half-open, ``(start, end)`` meaning offsets ``start <= o < end``. Two shapes appear:

* :data:`OffsetRanges` -- one planned range per topic-partition, as a micro-batch plans it;
* :data:`IntervalIndex` -- several sorted, disjoint, non-adjacent intervals per topic-partition, as the
  table's committed runs cover them.

Nothing here touches the filesystem; all functions return new objects and never mutate their input.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple

Interval = tuple[int, int]
OffsetRanges = dict[str, dict[int, Interval]]
RangesLike = Mapping[str, Mapping[int, Sequence[int]] | Mapping[str, Sequence[int]]]
"""Planned ranges as given: partition keys may be strings (after a JSON round trip), bounds any pair."""
IntervalIndex = dict[str, dict[int, list[Interval]]]

KEY_HEX_DIGITS = 16


class TopicPartitionInterval(NamedTuple):
    """One interval of one topic-partition, flat (for filters and messages)."""

    topic: str
    partition: int
    start: int
    end: int


def canonical_ranges(ranges: RangesLike) -> OffsetRanges:
    """Sorted topics and int partitions, validated ``0 <= start <= end``; empty ranges are dropped.

    Partition keys may be strings (they are after a JSON round trip). Dropping ``start == end`` makes a
    batch that planned an idle partition hash like the same batch without it.
    """
    result: OffsetRanges = {}
    for topic in sorted(ranges):
        parts: dict[int, Interval] = {}
        for raw_partition, bounds in ranges[topic].items():
            partition = int(raw_partition)
            if len(bounds) != 2:
                raise ValueError(f"{topic}/{partition}: expected [start, end], got {bounds!r}")
            start, end = int(bounds[0]), int(bounds[1])
            if partition < 0 or not 0 <= start <= end:
                raise ValueError(f"{topic}/{partition}: invalid range [{start}, {end})")
            if partition in parts:
                raise ValueError(f"{topic}/{partition}: partition given twice")
            if start < end:
                parts[partition] = (start, end)
        if parts:
            result[topic] = dict(sorted(parts.items()))
    return result


def ranges_to_json(ranges: OffsetRanges) -> dict[str, dict[str, list[int]]]:
    """``{topic: {"partition": [start, end]}}`` with sorted keys (JSON object keys are strings)."""
    return {t: {str(p): [s, e] for p, (s, e) in sorted(parts.items())} for t, parts in sorted(ranges.items())}


def index_to_json(index: IntervalIndex) -> dict[str, dict[str, list[list[int]]]]:
    """``{topic: {"partition": [[start, end], ...]}}`` (JSON object keys are strings)."""
    return {t: {str(p): [[s, e] for s, e in intervals] for p, intervals in parts.items()} for t, parts in index.items()}


def index_from_json(document: dict[str, dict[str, list[list[int]]]]) -> IntervalIndex:
    """The inverse of :func:`index_to_json`."""
    return {t: {int(p): [(s, e) for s, e in intervals] for p, intervals in parts.items()}
            for t, parts in document.items()}


def batch_key(ranges: OffsetRanges, query_id: str | None = None) -> str:
    """Deterministic key of a batch: first 16 hex digits of sha256 over the canonical JSON of its ranges and the
    id of the streaming query (its checkpoint) that planned them.

    A replay of the batch in the same checkpoint gets the same key; the same ranges planned by a new
    checkpoint (a recovery replaying offsets a restored table gave back) get another. ``None`` (no query: a
    tool or a test committing outside a stream) hashes the ranges alone.
    """
    ranges_json = ranges_to_json(canonical_ranges(ranges))
    document: object = ranges_json if query_id is None else {"query": query_id, "ranges": ranges_json}
    text = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:KEY_HEX_DIGITS]


def merge_intervals(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint intervals covering the same offsets; overlapping or adjacent ones are joined."""
    merged: list[Interval] = []
    for start, end in sorted(i for i in intervals if i[0] < i[1]):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def intersect_interval(interval: Interval, covered: Sequence[Interval]) -> list[Interval]:
    """The parts of ``interval`` inside ``covered`` (sorted, disjoint)."""
    start, end = interval
    pieces = [(max(start, s), min(end, e)) for s, e in covered]
    return [(s, e) for s, e in pieces if s < e]


def subtract_interval(interval: Interval, covered: Sequence[Interval]) -> list[Interval]:
    """The parts of ``interval`` outside ``covered`` (``covered`` sorted and disjoint)."""
    start, end = interval
    rest: list[Interval] = []
    cursor = start
    for s, e in covered:
        if e <= cursor or s >= end:
            continue
        if s > cursor:
            rest.append((cursor, s))
        cursor = max(cursor, e)
    if cursor < end:
        rest.append((cursor, end))
    return rest


def committed_within(ranges: OffsetRanges, index: IntervalIndex) -> IntervalIndex:
    """Sub-intervals of ``ranges`` already covered by ``index``; topic-partitions with none are left out."""
    return _per_partition(ranges, index, intersect_interval)


def uncommitted(ranges: OffsetRanges, index: IntervalIndex) -> IntervalIndex:
    """Sub-intervals of ``ranges`` not covered by ``index``; topic-partitions with none are left out."""
    return _per_partition(ranges, index, subtract_interval)


def _per_partition(
    ranges: OffsetRanges,
    index: IntervalIndex,
    operation: Callable[[Interval, Sequence[Interval]], list[Interval]],
) -> IntervalIndex:
    result: IntervalIndex = {}
    for topic, parts in sorted(ranges.items()):
        for partition, interval in sorted(parts.items()):
            pieces = operation(interval, index.get(topic, {}).get(partition, []))
            if pieces:
                result.setdefault(topic, {})[partition] = pieces
    return result


def flatten(index: IntervalIndex) -> list[TopicPartitionInterval]:
    """The index as a sorted flat list of ``(topic, partition, start, end)``."""
    return [
        TopicPartitionInterval(topic, partition, start, end)
        for topic, parts in sorted(index.items())
        for partition, intervals in sorted(parts.items())
        for start, end in intervals
    ]
