"""The long run's records (run header, samples, events) and the JSONL file they are appended to as they happen.

Every line of ``samples.jsonl`` is one JSON object with a ``kind``: ``run`` (first line: what was run, how and
where), ``sample`` (every ``--interval`` seconds: memory per process role, disk per area, the stream's status
and the commits seen since the previous sample) and ``event`` (as it happens: the stream started or ended, a
failure document, a red DAG run, a failed task, the platform's stop, a process left behind). A line is
flushed as soon as it is written, so a run cut short (power, kill -9) still has everything up to its last
sample, and ``--report-only`` rebuilds the report from the file alone.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import IO, Any, Self

MIB = 2**20


@dataclass(frozen=True)
class RunInfo:
    """What was run, how and where (the file's first line)."""

    started_at: str  # UTC, ISO 8601: when `up` was started
    minutes: float
    interval_s: float
    warmup_minutes: float
    flat_mib_per_hour: float
    burn_cores: int
    producer_rate: float
    home: str
    api_port: int
    results: str
    host: str
    cpus: int
    machine_ram_bytes: int
    source: dict[str, Any]  # the checkout's commit and what differs from it under include/ and jobs/
    command: list[str]
    settings_given: list[str] = field(default_factory=list)  # STREAMWARDEN_* names passed on to `up`
    broker_memory_limit_bytes: int = 0  # `up`'s --broker-memory-limit; 0 in runs that did not record it


@dataclass(frozen=True)
class RoleMemory:
    """The processes of one role at one sample."""

    processes: int
    rss_bytes: int
    pss_bytes: int | None  # None where the platform has no PSS (not Linux) or it could not be read
    peak_rss_bytes: int  # the most the role held at any two-second look since the previous sample
    long_lived_rss_bytes: int  # RSS of the role's processes that have run for LONG_LIVED_S or more
    long_lived_pids: list[int]  # which processes those are (a change is a restart, not growth)
    # the largest RSS of any one of the role's processes at any look since the previous sample: a role of short
    # processes (tasks) is fitted on it, since their sum measures how many overlapped, not what one holds
    largest_rss_bytes: int = 0


@dataclass(frozen=True)
class Sample:
    """One look at the platform, every ``interval_s``."""

    at: str  # UTC, ISO 8601
    elapsed_s: float  # since `up` was started
    roles: dict[str, RoleMemory]
    roles_seen: list[str]  # roles present at any two-second look since the previous sample
    unclassified: list[str]  # command lines of processes no role matched (to extend roles.py)
    disk_bytes: dict[str, int]  # area -> bytes allocated on disk
    disk_free_bytes: int
    machine_available_bytes: int
    load_average: list[float]
    stream_running: bool
    stream_pid: int | None
    last_batch_id: int | None
    heartbeat_age_s: float | None
    commit_times: list[float]  # epoch seconds of the stream commits (any table) found since the previous sample
    sample_ms: float  # what taking this sample took in wall time (more than its CPU on a busy machine)
    own_cpu_s: float  # CPU seconds the long run itself has used so far (its looks, samples and API calls)


class EventType(StrEnum):
    UP_STARTED = "up_started"
    API_READY = "api_ready"
    STREAM_STARTED = "stream_started"
    STREAM_ENDED = "stream_ended"  # the process holding the lease is gone
    STREAM_FAILURE = "stream_failure"  # a new last_failure.json
    RED_RUN = "red_run"
    FAILED_TASK = "failed_task"
    API_ERROR = "api_error"  # the Airflow API did not answer a look (recorded, not fatal)
    PLATFORM_EXITED = "platform_exited"  # `up` ended before it was asked to stop
    STOPPING = "stopping"
    STOPPED = "stopped"
    KILLED = "killed"  # `up` did not stop within the stop timeout and was killed
    LEFTOVER = "leftover"  # a process of the platform still alive after `up` ended
    TASK_ENDED = "task_ended"  # a task's process is gone: its task instance id, when it ran, its peak RSS
    TASK_NAMES = "task_names"  # what the API says each task instance was: {id: "dag_id.task_id"}


@dataclass(frozen=True)
class Event:
    """Something that happened, when it was noticed."""

    at: str
    elapsed_s: float
    type: EventType
    detail: dict[str, Any] = field(default_factory=dict)


Record = RunInfo | Sample | Event
_KINDS: dict[type[Any], str] = {RunInfo: "run", Sample: "sample", Event: "event"}


def to_line(record: Record) -> str:
    return json.dumps({"kind": _KINDS[type(record)], **asdict(record)}, sort_keys=True, default=str)


def from_line(line: str) -> Record:
    document: dict[str, Any] = json.loads(line)
    kind = document.pop("kind")
    if kind == "run":
        return RunInfo(**document)
    if kind == "sample":
        roles = {name: RoleMemory(**memory) for name, memory in document.pop("roles").items()}
        return Sample(roles=roles, **document)
    if kind == "event":
        return Event(type=EventType(document.pop("type")), **document)
    raise ValueError(f"unknown record kind {kind!r}")


@dataclass(frozen=True)
class RunLog:
    """What a samples file holds, read back."""

    info: RunInfo
    samples: list[Sample]
    events: list[Event]

    @classmethod
    def read(cls, path: Path) -> RunLog:
        """Every complete line of ``path``; a last line torn by a run that was killed mid-write is left out."""
        info: RunInfo | None = None
        samples: list[Sample] = []
        events: list[Event] = []
        for line in path.read_text().splitlines():
            try:
                record = from_line(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, RunInfo):
                info = record
            elif isinstance(record, Sample):
                samples.append(record)
            else:
                events.append(record)
        if info is None:
            raise ValueError(f"{path} has no run line: not a long run's samples file")
        return cls(info, samples, events)

    def of_type(self, *types: EventType) -> Iterator[Event]:
        return (event for event in self.events if event.type in types)


class SampleFile:
    """``samples.jsonl``, appended to and flushed record by record."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._handle: IO[str] | None = None

    def __enter__(self) -> Self:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._handle = open(self.path, "a")  # open for the whole run: a line is flushed at once
        return self

    def __exit__(self, *exc: object) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def write(self, record: Record) -> None:
        if self._handle is None:
            raise RuntimeError("the samples file is not open")
        self._handle.write(to_line(record) + "\n")
        self._handle.flush()
