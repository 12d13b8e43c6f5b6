"""The micro-batch durations of the last hour and their 99th percentile, for the warden's hang limit.

The first batch of a process is left out: it warms up Python workers, state stores and the source (tens of
seconds for a stateful query) and is covered by the warden's start-up grace instead. The p99 goes into every
heartbeat (``batch_p99_ms``), so the warden's hang limit (3 x p99, see :mod:`streamwarden.warden.limits`) follows
what this stream's batches really take:

    durations = BatchDurations()
    durations.add(at=time.time(), ms=420)   # each progress event
    durations.p99_ms(now=time.time())       # None until a batch after the first was seen
"""

from __future__ import annotations

import math
from collections import deque

WINDOW_S = 3600.0


class BatchDurations:
    """A rolling hour of batch durations (the first one added is skipped)."""

    def __init__(self, window_s: float = WINDOW_S) -> None:
        self.window_s = window_s
        self._seen_first = False
        self._durations: deque[tuple[float, int]] = deque()

    def add(self, *, at: float, ms: int) -> None:
        if not self._seen_first:
            self._seen_first = True
            return
        self._durations.append((at, ms))
        self._drop_old(at)

    def p99_ms(self, now: float) -> int | None:
        """The 99th percentile (nearest rank) of the durations within the window; None without any."""
        self._drop_old(now)
        if not self._durations:
            return None
        ordered = sorted(ms for _, ms in self._durations)
        return ordered[max(math.ceil(0.99 * len(ordered)) - 1, 0)]

    def _drop_old(self, now: float) -> None:
        while self._durations and now - self._durations[0][0] > self.window_s:
            self._durations.popleft()
