"""Garbage collection in the job's Python workers: young collections far apart, none while a bucket is processed,
and the start-up objects frozen.

Three costs, all measured on 2 cores:

* Python collects its young objects every 700 net allocations (its default). A worker of the stream builds a
  few objects per record (events, rows, tuples) and keeps them until its task's output is packed, so at the
  default the collector walks the same live objects again and again: measured on the session engine over
  100k records (2026-11-25), 9.3 us per record at the default, 7.3 at 20,000 (and 8.3 -> 6.5 with the typed
  decoder).
* PySpark's daemon runs a full ``gc.collect()`` in a reused worker after every task. A worker holds ~100k
  objects from its imports (PySpark, pandas, pyarrow, the job's modules) that live as long as it does, and
  a full collection walks them all: ~25 ms a task, 14% of the workers' CPU in batches of 100k records
  (py-spy, 2026-11-26). :func:`gc.freeze` moves them out of every later collection.
* Even 20,000 allocations apart, the young collections of the session operator walk the bucket's records and
  events again and again: ~1 us of the ~10 a record costs to split by session and run the engine over
  (``make bench-stage``, 2026-11-30). Those objects hold no reference cycles (records, events, rows, dicts), so
  reference counting frees them: :func:`collections_paused` runs a bucket without the cyclic collector.

A worker imports more with its first task of each kind (a Kafka read, the session operator), so a task starts
by freezing every object when the oldest generation holds more than :data:`FREEZE_ABOVE`. The daemon's full
collection has just run, so the old ones are alive; the young ones' garbage is collected first, and what the
task has made so far is frozen with them. In steady state the oldest generation stays below the bound and
nothing more is frozen, so the cycles of a task are collected: freezing is bounded to a worker's first tasks.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

YOUNG_ALLOCATIONS = 20_000
"""Net allocations between young-generation collections in a worker (older generations keep their ratios)."""
FREEZE_ABOVE = 10_000
"""A task freezes the oldest generation when it holds more objects than this (a full collection of 10k takes
~2.5 ms here)."""


def spread_collections() -> None:
    """At a task's start: collect the young generation every :data:`YOUNG_ALLOCATIONS` allocations in this
    process, and freeze the oldest generation out of every later collection when it has grown past
    :data:`FREEZE_ABOVE` (the worker's imports)."""
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_ALLOCATIONS, older, oldest)
    if len(gc.get_objects(generation=2)) > FREEZE_ABOVE:
        gc.collect(1)
        gc.freeze()


@contextlib.contextmanager
def collections_paused() -> Iterator[None]:
    """No cyclic collection inside (a bucket of the session operator); the collector is on again after it, however
    it ends (the workers always run with it on)."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
