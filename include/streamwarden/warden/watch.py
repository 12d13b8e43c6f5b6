"""The continuous watch: notices within seconds that the stream died, failed or hung, once per process.

The scheduled health check (:mod:`.health`) runs every two minutes and asks the broker; this watch looks every
``STREAMWARDEN_WARDEN_WATCH_INTERVAL`` (2 s) at what is cheap to read and changes the moment something goes
wrong: the checkpoint lease (released by the kernel when its holder dies, even by kill -9), the exit document,
the launch record and the heartbeat. Airflow runs it as a trigger in the triggerer (no worker slot,
:class:`streamwarden_airflow.triggers.watch.StreamWatchTrigger`); what it reports wakes the supervisor's
decision and restart path at once.

One look (:meth:`StreamWatch.look`):

1. held by a recovery or an upgrade (``run/hold.json``): nothing to report, they stopped it on purpose;
2. a live process holds the lease: **HUNG** when its heartbeat is older than the progress limit
   (:mod:`.limits`: the start-up grace until its first batch, then max(3 x trigger, floor, 3 x p99 batch));
3. nobody holds it: nothing while a launched process is still starting (within the start-up grace);
   **FAILED** when the job wrote an exit document (its class decides: restart or a person), else **DEAD**.

Each process is reported once (a hung process that the restart then kills is not reported again as dead),
each exit document once; the supervisor's pool, backoff, breaker and the lease decide what happens, so a
report never causes two restarts.

    watch = StreamWatch(settings, warden)
    while True:
        if (sighting := watch.look()) is not None:
            ...  # wake the supervisor with sighting.to_json()
        time.sleep(warden.watch_interval)
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from streamwarden.runfiles.failure_file import read_failure
from streamwarden.runfiles.heartbeat import read_heartbeat
from streamwarden.runfiles.hold import read_hold
from streamwarden.runfiles.lease import LeaseHolder, read_holder
from streamwarden.settings import Settings
from streamwarden.warden.launcher import running_holder, starting_launch
from streamwarden.warden.limits import progress_limit
from streamwarden.warden.settings import WardenSettings


class Sign(StrEnum):
    """What the watch saw."""

    DEAD = "DEAD"
    FAILED = "FAILED"
    HUNG = "HUNG"


@dataclass(frozen=True)
class Sighting:
    """One report of the watch: what it saw, about which process, when, and the evidence."""

    sign: Sign
    pid: int | None
    detected_at: str
    evidence: str
    key: str  # reported once per key

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "sign": self.sign.value}

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> Sighting:
        return cls(**{**document, "sign": Sign(document["sign"])})

    def text(self) -> str:
        return f"{self.sign.value} (pid {self.pid}) detected at {self.detected_at}: {self.evidence}"


class StreamWatch:
    """Follows the lease holder from one look to the next and reports each death, failure or hang once."""

    def __init__(self, settings: Settings, warden: WardenSettings) -> None:
        self.settings = settings
        self.warden = warden
        self.reported: set[str] = set()
        self.last_holder: LeaseHolder | None = None

    def look(self, now: float | None = None) -> Sighting | None:
        """A new sighting, or None (healthy, starting, held, or already reported)."""
        now = time.time() if now is None else now
        if read_hold(self.settings) is not None:
            return None
        holder = running_holder(self.settings)
        if holder is not None:
            self.last_holder = holder
            return self._report(self._hung(holder, now), now)
        return self._report(self._gone(now), now)

    def _hung(self, holder: LeaseHolder, now: float) -> tuple[Sign, int | None, str, str] | None:
        heartbeat = read_heartbeat(self.settings.run_paths.heartbeat)
        if heartbeat is None or heartbeat.pid != holder.pid:
            since_lease = now - datetime.fromisoformat(holder.started_at).timestamp()
            if since_lease <= self.warden.startup_grace:
                return None
            return (Sign.HUNG, holder.pid, f"no heartbeat {since_lease:.0f}s after taking the lease "
                                           f"(grace {self.warden.startup_grace:g}s)", f"pid:{holder.pid}")
        limit = progress_limit(heartbeat, self.settings.trigger_interval, self.warden)
        age = heartbeat.age_seconds(datetime.fromtimestamp(now, UTC))
        if age <= limit.seconds:
            return None
        return (Sign.HUNG, holder.pid, f"heartbeat ({heartbeat.event}, batch {heartbeat.batch_id}) is {age:.0f}s "
                                       f"old, limit {limit.describe()}", f"pid:{holder.pid}")

    def _gone(self, now: float) -> tuple[Sign, int | None, str, str] | None:
        if starting_launch(self.settings, now, self.warden.startup_grace) is not None:
            return None  # launched, not holding the lease yet
        last = self.last_holder or read_holder(self.settings.lease_path)  # seen, else the lease file's last
        pid = last.pid if last is not None else None
        failure = read_failure(self.settings.run_paths.failure)
        if failure is not None:
            return (Sign.FAILED, pid, f"exited with {failure.failure_class.value} (exit {failure.exit_code}): "
                                      f"{failure.message}", f"failure:{failure.occurred_at}")
        return (Sign.DEAD, pid, "no live process holds the checkpoint lease",
                f"pid:{pid}" if pid is not None else "dead:unknown")

    def _report(self, seen: tuple[Sign, int | None, str, str] | None, now: float) -> Sighting | None:
        if seen is None:
            return None
        sign, pid, evidence, key = seen
        if key in self.reported:
            return None
        self.reported.add(key)
        return Sighting(sign, pid, datetime.fromtimestamp(now, UTC).isoformat(), evidence, key)
