"""The stream seen from its files: when its process starts and ends, its failure documents, its Delta commits.

The process is the checkpoint lease's holder, read from the lease file without probing the lock: a probe
takes the lock for an instant, and a stream starting in that instant would be refused (exit 73). A look
costs one small file read and one pid check. ``streamwarden status`` (which does probe) is read at
samples only, as ``up`` itself and the warden already do.

A new ``last_failure.json`` (its time and pid not seen before) is an event even when its process was never
seen holding the lease: a launch that dies before it takes the lease is a death too. The warden moves the
document aside when it restarts the stream, so it is looked for at every look as well.

Commits are the stream's own (a commit whose metadata names its Kafka offset ranges, see
:func:`streamwarden.tables.commit_rate.records_of`; maintenance's compactions name none), read from each
table's Delta log one new version file at a time: no listing, nothing re-read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamwarden.runfiles.failure_file import read_failure
from streamwarden.runfiles.heartbeat import read_heartbeat
from streamwarden.runfiles.lease import read_holder
from streamwarden.settings import Settings
from streamwarden.tables.commit_rate import records_of
from streamwarden.tables.location import pipeline_tables

from .records import EventType


@dataclass(frozen=True)
class Noticed:
    type: EventType
    detail: dict[str, Any]


@dataclass
class StreamWatch:
    """Notices the stream's process starting and ending, and new failure documents."""

    settings: Settings
    pid: int | None = None
    deaths: set[int] = field(default_factory=set)  # pids that ended or failed while the platform was not stopping
    _failures_seen: set[tuple[str, int]] = field(default_factory=set)

    def look(self, stopping: bool) -> list[Noticed]:
        noticed: list[Noticed] = []
        holder = read_holder(self.settings.lease_path)
        alive_pid = holder.pid if holder is not None and holder.is_alive() else None
        if alive_pid != self.pid:
            if self.pid is not None:
                if not stopping:
                    self.deaths.add(self.pid)
                noticed.append(Noticed(EventType.STREAM_ENDED, {"pid": self.pid, "during_stop": stopping,
                                                                **self._last_heartbeat()}))
            if alive_pid is not None:
                noticed.append(Noticed(EventType.STREAM_STARTED, {"pid": alive_pid}))
            self.pid = alive_pid
        try:
            failure = read_failure(self.settings.run_paths.failure)
        except (OSError, ValueError, TypeError, KeyError):
            failure = None  # caught mid-write (it is written atomically, but moved aside by the warden)
        if failure is not None and (failure.occurred_at, failure.pid) not in self._failures_seen:
            self._failures_seen.add((failure.occurred_at, failure.pid))
            if not stopping:
                self.deaths.add(failure.pid)
            noticed.append(Noticed(EventType.STREAM_FAILURE, {
                "pid": failure.pid, "failure_class": failure.failure_class.value, "exit_code": failure.exit_code,
                "message": failure.message[:1000], "occurred_at": failure.occurred_at, "during_stop": stopping}))
        return noticed


    def _last_heartbeat(self) -> dict[str, Any]:
        """What the ended process last said (a process killed as hung by the warden writes no failure document: its
        heartbeat's age tells)."""
        try:
            heartbeat = read_heartbeat(self.settings.run_paths.heartbeat)
        except (OSError, ValueError, TypeError):
            return {}
        if heartbeat is None:
            return {}
        return {"heartbeat_event": heartbeat.event, "heartbeat_age_s": round(heartbeat.age_seconds(), 1),
                "last_batch_id": heartbeat.batch_id}


@dataclass
class DeltaCommits:
    """The stream's commits to the pipeline's tables, read as their Delta logs grow."""

    settings: Settings
    _next_version: dict[str, int] = field(default_factory=dict)

    def new_commit_times(self) -> list[float]:
        """Epoch seconds of the stream commits written since the previous call, oldest first."""
        times: list[float] = []
        for table in pipeline_tables(self.settings):
            log = self.settings.root("output") / table / "_delta_log"
            version = self._next_version.get(table, 0)
            while (info := _commit_info(log / f"{version:020d}.json")) is not None:
                if records_of(info) is not None:
                    times.append(float(info.get("timestamp", 0)) / 1000)
                version += 1
            self._next_version[table] = version
        return sorted(times)


def _commit_info(path: Path) -> dict[str, Any] | None:
    """The ``commitInfo`` action of one Delta log entry (an empty one when it has none); None when the entry does
    not exist yet."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            action = json.loads(line)
        except json.JSONDecodeError:
            return None  # being written: read again at the next sample
        if "commitInfo" in action:
            info: dict[str, Any] = action["commitInfo"]
            return info
    return {}
