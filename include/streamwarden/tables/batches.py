"""Regrouping rows: record batches into tables of about a given number of rows, rows into runs of equal keys."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]


def regrouped(batches: Iterable[pa.RecordBatch], rows: int, max_bytes: int | None = None) -> Iterator[pa.Table]:
    """``batches`` (empty ones left out) as tables of at least ``rows`` rows, or ``max_bytes`` bytes, each, the
    last one smaller: work with a fixed cost per call (a file, an IPC payload) is done on a few large tables, not
    many small ones, and the bytes bound what is held at once when rows are large."""
    pending: list[pa.RecordBatch] = []
    size = nbytes = 0
    for batch in batches:
        if batch.num_rows:
            pending.append(batch)
            size += batch.num_rows
            nbytes += batch.nbytes
        if size >= rows or (max_bytes is not None and nbytes >= max_bytes):
            yield pa.Table.from_batches(pending)
            pending, size, nbytes = [], 0, 0
    if pending:
        yield pa.Table.from_batches(pending)


def sorted_runs(keys: np.ndarray) -> tuple[np.ndarray, list[tuple[int, int, int]]]:
    """A stable order of the rows that brings equal ``keys`` together, and ``(key, start, count)`` of each run
    of equal keys in that order (ascending keys; the rows of a run keep their order)."""
    order = np.argsort(keys, kind="stable")
    values, starts, counts = np.unique(keys[order], return_index=True, return_counts=True)
    return order, list(zip(values.tolist(), starts.tolist(), counts.tolist(), strict=True))
