"""Regrouping record batches: by rows, and by bytes when rows are large."""

from __future__ import annotations

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]

from streamwarden.tables.batches import regrouped


def batch(first: int, rows: int, width: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"n": list(range(first, first + rows)), "v": [b"x" * width] * rows})


def test_batches_are_gathered_to_the_rows_or_the_bytes_whichever_comes_first() -> None:
    small = [batch(i * 10, 10, 1) for i in range(7)]  # 70 rows of ~10 bytes
    assert [t.num_rows for t in regrouped(small, 25)] == [30, 30, 10]
    large = [batch(i * 10, 10, 1000) for i in range(7)]  # ~10 kB a batch
    assert [t.num_rows for t in regrouped(large, 25, max_bytes=15_000)] == [20, 20, 20, 10]
    assert [t.num_rows for t in regrouped(large, 25)] == [30, 30, 10]  # no bytes bound: rows only
    gathered = list(regrouped(iter([batch(0, 0, 1), *large]), 25, max_bytes=15_000))
    assert [n for t in gathered for n in t["n"].to_pylist()] == list(range(70))  # every row once, in order
