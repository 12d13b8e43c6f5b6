"""Garbage collection in the job's Python workers: young collections far apart, and the start-up objects frozen.

Two costs, both measured on 2 cores:

* Python collects its young objects every 700 net allocations (its default). A worker of the stream builds a
  few objects per record (events, rows, tuples) and keeps them until its task's output is packed, so at the
  default the collector walks the same live objects again and again: measured on the session engine over
  100k records (2026-11-25), 9.3 us per record at the default, 7.3 at 20,000 (and 8.3 -> 6.5 with the typed
  decoder).
* PySpark's daemon runs a full ``gc.collect()`` in a reused worker after every task. A worker holds ~100k
  objects from its imports (PySpark, pandas, pyarrow, the job's modules) that live as long as it does, and
  a full collection walks them all: ~25 ms a task, 14% of the workers' CPU in batches of 100k records
  (py-spy, 2026-11-26). :func:`gc.freeze` moves them out of every later collection.

The objects of a task are freed by reference counting when it ends; only cycles wait for a collection, and
those made after the freeze are still collected.
"""

from __future__ import annotations

import gc

YOUNG_ALLOCATIONS = 20_000
"""Net allocations between young-generation collections in a worker (older generations keep their ratios)."""


def spread_collections() -> None:
    """Collect the young generation every :data:`YOUNG_ALLOCATIONS` allocations in this process, and, the first
    time in a process, collect once and freeze what survives (its imports) out of every later collection."""
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_ALLOCATIONS, older, oldest)
    if gc.get_freeze_count() == 0:
        gc.collect()
        gc.freeze()
