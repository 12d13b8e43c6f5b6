"""Garbage collection in the job's Python workers (:mod:`streamwarden.stream.worker_gc`), in a fresh interpreter
each: freezing is for the life of a process."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

INCLUDE = Path(__file__).resolve().parents[2] / "include"

WORKER = textwrap.dedent("""
    import gc, json, weakref
    import pyarrow, pandas  # what a worker imports before its first task
    from streamwarden.stream.worker_gc import YOUNG_ALLOCATIONS, spread_collections

    class Node:
        pass

    def cycle():
        a, b = Node(), Node()
        a.other, b.other = b, a
        return weakref.ref(a)

    before_freeze = cycle()  # garbage when the first task starts: collected, not frozen
    spread_collections()
    frozen = gc.get_freeze_count()
    young = gc.get_threshold()[0]
    after_freeze = cycle()  # garbage of a task: still collected
    spread_collections()  # the next task
    collected = gc.collect()
    print(json.dumps({"frozen": frozen, "frozen_again": gc.get_freeze_count(), "young": young,
                      "young_wanted": YOUNG_ALLOCATIONS, "cycle_before_freeze_gone": before_freeze() is None,
                      "cycle_after_freeze_gone": after_freeze() is None, "collected": collected,
                      "tracked_outside_freeze": len(gc.get_objects())}))
""")


def run_worker() -> dict[str, int | bool]:
    out = subprocess.run([sys.executable, "-c", WORKER], check=True, capture_output=True, text=True,
                         env={"PYTHONPATH": str(INCLUDE)}, timeout=120)
    result: dict[str, int | bool] = json.loads(out.stdout)
    return result


def test_a_worker_freezes_its_start_up_objects_once_and_still_collects_its_tasks_cycles() -> None:
    result = run_worker()
    assert result["young"] == result["young_wanted"]
    # the imports (pandas, pyarrow) are tens of thousands of objects, out of every later collection
    assert result["frozen"] > 20_000
    assert result["frozen_again"] == result["frozen"], "a later task must not freeze its own objects"
    assert result["cycle_before_freeze_gone"], "garbage at the first task is collected before the freeze"
    assert result["cycle_after_freeze_gone"] and result["collected"] >= 2, "a task's cycles are still collected"
    # what a full collection walks after the freeze: the objects made since, not the imports
    assert result["tracked_outside_freeze"] < result["frozen"] // 10
