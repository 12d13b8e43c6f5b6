"""Garbage collection in the job's Python workers (:mod:`streamwarden.stream.worker_gc`), each case in a fresh
interpreter (freezing is for the life of a process), its tasks run the way PySpark's daemon runs them in a
reused worker: the task calls :func:`spread_collections` first, and a full collection follows it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from fixtures import REPO

INCLUDE = REPO / "include"

PRELUDE = textwrap.dedent("""
    import gc, json, weakref
    from streamwarden.stream.worker_gc import YOUNG_ALLOCATIONS, spread_collections

    class Node:
        pass

    def cycle():
        a, b = Node(), Node()
        a.other, b.other = b, a
        return a

    def task(imports=()):
        setup = cycle()  # made before the task's first call (PySpark's command, the reader, the processor)
        spread_collections()
        for name in imports:
            __import__(name)
        garbage = weakref.ref(cycle())  # garbage the task leaves
        gone = weakref.ref(setup)
        del setup
        gc.collect()  # the daemon's collection after the task
        return garbage() is None and gone() is None
""")


def run_worker(body: str) -> dict[str, object]:
    script = PRELUDE + textwrap.dedent(body)
    out = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True,
                         env={"PYTHONPATH": str(INCLUDE)}, timeout=120)
    result: dict[str, object] = json.loads(out.stdout)
    return result


def test_a_workers_first_task_freezes_its_imports_out_of_the_collections_after_every_task() -> None:
    result = run_worker("""
        import pyarrow, pandas  # what the daemon's fork has imported before the first task
        task()
        print(json.dumps({"frozen": gc.get_freeze_count(), "walked_by_a_collection": len(gc.get_objects()),
                          "young": gc.get_threshold()[0], "young_wanted": YOUNG_ALLOCATIONS}))
    """)
    assert result["young"] == result["young_wanted"]
    assert isinstance(result["frozen"], int) and result["frozen"] > 20_000  # pandas and pyarrow
    assert isinstance(result["walked_by_a_collection"], int)
    assert result["walked_by_a_collection"] < result["frozen"] // 10


def test_what_a_later_task_imports_is_frozen_at_the_next_task_and_then_nothing_more() -> None:
    result = run_worker("""
        task()
        first = gc.get_freeze_count()
        task(imports=["pandas"])  # a worker's first session task after a Kafka read
        imported = len(gc.get_objects())  # walked by the daemon's collection until the next task
        task()
        second = gc.get_freeze_count()
        collected = [task() for _ in range(200)]
        print(json.dumps({"first": first, "imported": imported, "second": second,
                          "after": gc.get_freeze_count(), "collected": all(collected)}))
    """)
    assert isinstance(result["imported"], int) and result["imported"] > 20_000
    assert isinstance(result["second"], int) and isinstance(result["first"], int)
    assert result["second"] >= result["first"] + result["imported"] // 2, "the later imports are frozen"
    assert result["after"] == result["second"], "steady tasks freeze nothing more"
    assert result["collected"] is True, "every steady task's cycles, setup included, are collected"
