"""The embedded broker's memory against its limit: the growth rate, the time left, and when to stop the demo.

Tansu's in-memory storage keeps every record for as long as it runs (no retention, no DeleteRecords), so
the broker of ``streamwarden up`` grows with every message the demo producer sends. ``up`` samples its
resident memory, says how fast it grows and when it would reach its limit, and at the limit stops the demo
producer: the broker then stays at that size and the rest of the platform keeps running.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass
from enum import Enum

import psutil

MIB = 1024 * 1024
DEMO_RATE = 200.0
"""``up``'s demo messages a second. Measured here, the broker grows ~120 MiB an hour at 200 msg/s (~170 bytes a
message in one-second lz4 batches): a day is ~2.9 GiB, under the 4 GiB default limit. At 2,000 msg/s it
grows ~0.8 GiB an hour and reaches that limit in about five hours."""
_WINDOW_S = 600.0  # growth measured over the last ten minutes: steady enough, still current
_WARN_SHARE = 0.8
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1024, "m": MIB, "g": 1024 * MIB, "t": 1024 * 1024 * MIB}


def parse_size(text: str) -> int:
    """Bytes of ``512m``, ``2g``, ``1.5GiB`` or a plain number; ValueError naming the text otherwise."""
    match = _SIZE.match(text)
    if match is None or float(match.group(1)) <= 0:
        raise ValueError(f"{text!r} is not a size such as 512m, 2g or 1.5GiB")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def default_limit() -> int:
    """A sixth of the machine's memory, at most 4 GiB: room for Spark, Airflow and the rest beside it."""
    return min(4 * 1024 * MIB, psutil.virtual_memory().total // 6)


class Level(Enum):
    OK = "ok"
    WARN = "warn"  # past 80% of the limit: said once, with the time left
    FULL = "full"  # at the limit: the demo producer is stopped


@dataclass(frozen=True)
class Reading:
    """One look at the broker's memory."""

    rss: int
    limit: int
    growth: float | None  # bytes per second over the window; None until two samples a minute apart
    level: Level

    @property
    def seconds_left(self) -> float | None:
        """Time until the limit at the current growth; None when it does not grow (or not yet known)."""
        if self.growth is None or self.growth <= 0:
            return None
        return max(0.0, (self.limit - self.rss) / self.growth)

    def describe(self) -> str:
        """E.g. ``broker 412 MiB of 4096 MiB, +118 MiB/h, limit in ~31.2 h``."""
        text = f"broker {self.rss / MIB:.0f} MiB of {self.limit / MIB:.0f} MiB"
        if self.growth is not None:
            text += f", {self.growth * 3600 / MIB:+.0f} MiB/h"
        left = self.seconds_left
        if left is not None:
            text += f", limit in ~{left / 3600:.1f} h" if left >= 3600 else f", limit in ~{left / 60:.0f} min"
        return text


class BrokerMemory:
    """Samples of one broker process's resident memory, judged against ``limit`` bytes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._samples: deque[tuple[float, int]] = deque()

    def add(self, now: float, rss: int) -> Reading:
        """Record a sample taken at ``now`` (monotonic seconds) and judge it."""
        self._samples.append((now, rss))
        while now - self._samples[0][0] > _WINDOW_S:
            self._samples.popleft()
        first_at, first_rss = self._samples[0]
        growth = (rss - first_rss) / (now - first_at) if now - first_at >= 60 else None
        level = Level.FULL if rss >= self.limit else Level.WARN if rss >= _WARN_SHARE * self.limit else Level.OK
        return Reading(rss, self.limit, growth, level)
