"""Bounded over the run: each role's largest process and its number of processes, and the platform's open files, in
the second half of the faults' window against the first half.

The long run fits a slope to each role's long-lived processes; under the soak the stream's processes are killed
every few minutes, so a role's memory is a saw-tooth of short lives, not a line. Bounded means the second half's
peak is not much above the first's: growth a restart does not reset (a leak in a long-lived component, state
that grows with every restart, processes a fault leaves behind) shows there. A role's largest process, not the sum
of its processes: the sum of the tasks' role measures how many tasks overlapped, not what one holds. The broker is
left out: it keeps every record by design (memory storage); `up` bounds it with its memory limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streamwarden_longrun.analysis import BROKER
from streamwarden_longrun.records import MIB, RunLog

GROWTH_RATIO = 1.25
MEMORY_SLACK_MIB = 64.0
FILES_SLACK = 200
PROCESS_SLACK = 2
MIN_WINDOW_S = 1200.0
"""Shorter windows are reported, not judged: a few minutes of a saw-tooth say nothing about growth."""


@dataclass(frozen=True)
class Halves:
    what: str
    first_max: float
    second_max: float
    bounded: bool


def _halves(what: str, points: list[tuple[float, float]], start: float, end: float, slack: float) -> Halves | None:
    middle = (start + end) / 2
    first = [value for at, value in points if start <= at < middle]
    second = [value for at, value in points if middle <= at <= end]
    if not first or not second:
        return None
    return Halves(what, round(max(first), 1), round(max(second), 1), max(second) <= GROWTH_RATIO * max(first) + slack)


def bounded(log: RunLog, gauges: list[dict[str, Any]], start_s: float, end_s: float) -> tuple[bool, list[Halves]]:
    """``(judged, halves)`` for every role (peak RSS, MiB) and the open files, between ``start_s`` and ``end_s``."""
    if end_s - start_s < MIN_WINDOW_S:
        return False, []
    found: list[Halves] = []
    roles = sorted({role for sample in log.samples for role in sample.roles} - {BROKER})
    for role in roles:
        present = [s for s in log.samples if role in s.roles]
        largest = [(s.elapsed_s, s.roles[role].largest_rss_bytes / MIB) for s in present]
        count = [(s.elapsed_s, float(s.roles[role].processes)) for s in present]
        for halves in (_halves(f"{role}: largest process RSS (MiB)", largest, start_s, end_s, MEMORY_SLACK_MIB),
                       _halves(f"{role}: processes", count, start_s, end_s, PROCESS_SLACK)):
            if halves is not None:
                found.append(halves)
    files = _halves("open files", [(g["at_s"], float(g["open_files"])) for g in gauges], start_s, end_s, FILES_SLACK)
    if files is not None:
        found.append(files)
    return True, found
