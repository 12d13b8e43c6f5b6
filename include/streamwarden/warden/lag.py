"""Consumer lag judged with Burrow's evaluation rules over a sliding window of observations.

One observation per partition per health check: when it was taken, the committed offset (from the
checkpoint), the broker's high watermark and when the committed offset was last written. Rules, in
Burrow's order, for a window in which the lag was never zero (any zero lag means OK):

* ``ERR``: the committed offset went backwards, or is beyond the high watermark (rewind, topic recreated);
* ``STOP``: nothing committed for longer than the window's commits span (the consumer stopped);
* ``STALL``: the committed offset did not move over the window while the lag stayed or grew;
* ``WARN``: offsets move but the lag never shrank over a *full* window (falling behind): with records
  arriving all the time the lag is never zero, and whether it grew between two or three checks is the chance
  of when they fell between batches, so a trend needs the window's ``size`` checks, as Burrow's needs its
  window of offsets;
* else ``OK``. A window of fewer than two observations is ``OK`` unless it shows ``ERR``.

A window holds only the checks of the current start of the stream (``start``: when its process took the
lease): a restarted stream is not judged by its predecessor's offsets. Before the first commit of a start
the status is ``STARTING`` and no observation is kept: nothing has been committed yet, so every partition
would otherwise look stalled while the first batch runs.

``UNKNOWN`` is no partition's state: it is the whole lag's when the broker could not be asked (its high
watermarks are missing, so no lag was measured), kept apart from Burrow's ``ERR`` (offsets that make no sense).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from itertools import pairwise


class LagStatus(StrEnum):
    """Burrow's partition states, worst last."""

    OK = "OK"
    STARTING = "STARTING"  # not Burrow's: before the first commit of the stream's current start
    UNKNOWN = "UNKNOWN"  # not Burrow's: the broker could not be asked, no lag measured
    WARN = "WARN"
    STALL = "STALL"
    STOP = "STOP"
    ERR = "ERR"

    @property
    def rank(self) -> int:
        return list(LagStatus).index(self)


@dataclass(frozen=True)
class LagObservation:
    """One look at one partition (times are epoch seconds)."""

    observed_at: float
    committed: int
    high_watermark: int
    committed_at: float  # when the committed offset was last written (the checkpoint's commit file)
    start: float = 0.0  # when the process that made the check's commits took the lease (0: none running)

    @property
    def lag(self) -> int:
        return max(self.high_watermark - self.committed, 0)

    def to_json(self) -> list[float | int]:
        return [self.observed_at, self.committed, self.high_watermark, self.committed_at, self.start]

    @classmethod
    def from_json(cls, row: list[float | int]) -> LagObservation:
        return cls(float(row[0]), int(row[1]), int(row[2]), float(row[3]), float(row[4]) if len(row) > 4 else 0.0)


def evaluate(window: list[LagObservation], now: float, size: int) -> LagStatus:
    """Burrow's status of one partition from its observations (oldest first); ``size``: how many a full window
    holds."""
    if not window:
        return LagStatus.OK
    if any(o.committed > o.high_watermark for o in window) or any(
            b.committed < a.committed for a, b in pairwise(window)):
        return LagStatus.ERR
    if any(o.lag == 0 for o in window) or len(window) < 2:
        return LagStatus.OK
    first, last = window[0], window[-1]
    if now - last.committed_at > last.committed_at - first.committed_at:
        return LagStatus.STOP
    if last.committed == first.committed:
        return LagStatus.STALL
    if len(window) >= size and all(b.lag >= a.lag for a, b in pairwise(window)):
        return LagStatus.WARN
    return LagStatus.OK


def slide(window: list[LagObservation], observation: LagObservation, size: int) -> list[LagObservation]:
    """The window with ``observation`` appended and only the last ``size`` kept, all of its start."""
    return [*(o for o in window if o.start == observation.start), observation][-size:]


def worst(statuses: list[LagStatus]) -> LagStatus:
    """The most severe status (``OK`` for none)."""
    return max(statuses, key=lambda s: s.rank, default=LagStatus.OK)
