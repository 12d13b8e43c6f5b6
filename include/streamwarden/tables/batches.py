"""Arrow record batches regrouped into tables of about a given number of rows."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]


def regrouped(batches: Iterable[pa.RecordBatch], rows: int) -> Iterator[pa.Table]:
    """``batches`` (empty ones left out) as tables of at least ``rows`` rows each, the last one smaller: work
    with a fixed cost per call (a file, an IPC payload) is done on a few large tables, not many small ones."""
    pending: list[pa.RecordBatch] = []
    size = 0
    for batch in batches:
        if batch.num_rows:
            pending.append(batch)
            size += batch.num_rows
        if size >= rows:
            yield pa.Table.from_batches(pending)
            pending, size = [], 0
    if pending:
        yield pa.Table.from_batches(pending)
