"""How long the warden lets the stream go without a heartbeat before it counts as hung.

One rule, shared by the continuous watch (:mod:`.watch`) and the scheduled health check (:mod:`.health`):

* **first batch of a process pending** (its heartbeat has no batch id yet): the start-up grace
  (``STREAMWARDEN_WARDEN_STARTUP_GRACE``), counted from when the process took the lease: the first batch
  warms up Python workers, state stores and the source;
* **after it**: ``max(3 x trigger interval, HEARTBEAT_FLOOR, 3 x p99 batch duration of the last hour)``. The
  stream writes a heartbeat after every batch and, while idle, every
  ``spark.sql.streaming.noDataProgressEventInterval`` (10 s), so a healthy stream's heartbeat is never older
  than its longest batch; the p99 (in the heartbeat, :mod:`streamwarden.stream.batch_durations`) lets a stream
  whose batches are slow keep a limit that fits it, with no setting to tune.
"""

from __future__ import annotations

from dataclasses import dataclass

from streamwarden.runfiles.heartbeat import Heartbeat
from streamwarden.warden.settings import WardenSettings


@dataclass(frozen=True)
class ProgressLimit:
    """The heartbeat age beyond which the stream is hung, and where that number comes from."""

    seconds: float
    basis: str
    first_batch: bool = False

    def describe(self) -> str:
        return f"{self.seconds:g}s ({self.basis})"


def progress_limit(heartbeat: Heartbeat, trigger_interval_s: float, warden: WardenSettings) -> ProgressLimit:
    """The limit for ``heartbeat`` (the lease holder's own)."""
    if heartbeat.batch_id is None:
        return ProgressLimit(warden.startup_grace, "start-up grace: first batch pending", first_batch=True)
    trigger = heartbeat.trigger_interval_s or trigger_interval_s
    candidates = [(3 * trigger, "3 x trigger"), (warden.heartbeat_floor, "floor")]
    if heartbeat.batch_p99_ms is not None:
        candidates.append((3 * heartbeat.batch_p99_ms / 1000, "3 x p99 batch of the last hour"))
    seconds, basis = max(candidates, key=lambda candidate: candidate[0])
    return ProgressLimit(round(seconds, 3), basis)
