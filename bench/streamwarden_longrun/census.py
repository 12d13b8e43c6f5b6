"""Who runs under `up`, by role, and how much memory each role holds.

`up` makes itself the child subreaper, so every process of the platform, the stream started by an Airflow task
that has since exited included, is one of its descendants. A *look* (every two seconds) lists them, reads each
one's command line and RSS (two small files under /proc: well under a millisecond each), registers every
process ever seen (what must be gone once `up` has stopped) and keeps each role's highest RSS since the last
sample, and its largest process's (a task runs for seconds: a look every 10 s would miss most of them). It also
sums apart the RSS of the processes that have run for :data:`LONG_LIVED_S`: a leak that takes hours lives in a
process that lives for hours, while a role's short-lived processes (a DAG file's parse, a task) come and go
between samples and make its sum jump by hundreds of MiB, noise that would swamp any slope. A *sample* also reads
PSS, which splits a page shared by forked processes (a PySpark worker and its daemon, a parse process and the
dag-processor) between them instead of counting it once per process: the kernel walks every page for it,
about 3 ms of CPU per process here, so it is read at samples only.

A task's process (``airflow worker -- <task instance id>``) is also followed on its own, from its first look
to its last, with its highest RSS: :meth:`Census.ended_tasks` hands over those that are gone, so each task's
peak is recorded with its task instance (named later through the API: which DAG's task it was).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil

from .records import RoleMemory
from .roles import OTHER, classify

ProcessKey = tuple[int, float]  # pid and create time: a pid alone may be reused
LONG_LIVED_S = 300.0
TASK_TITLE = re.compile(r"airflow worker -- ([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\b")
"""The title Airflow's task runner gives the process running a task: its task instance's id."""


@dataclass
class TaskProcess:
    """One task's process, from its first look to its last."""

    ti_id: str
    first_seen: float  # epoch seconds
    last_seen: float
    peak_rss_bytes: int


@dataclass
class SeenProcess:
    role: str
    command: str


@dataclass
class RoleLook:
    processes: int = 0
    rss_bytes: int = 0
    pss_bytes: int | None = 0  # None once a process's PSS could not be read (or was not asked for)
    long_lived_rss_bytes: int = 0
    largest_rss_bytes: int = 0
    long_lived_pids: list[int] = field(default_factory=list)


@dataclass
class Census:
    """The processes under ``root_pid`` (`up`), and under each of ``also()`` (processes of the platform a program
    built on the long run started outside `up`'s tree: the soak's restarted Airflow components), looked at again and
    again."""

    root_pid: int
    also: Callable[[], list[int]] = list
    seen: dict[ProcessKey, SeenProcess] = field(default_factory=dict)
    _peaks: dict[str, int] = field(default_factory=dict)
    _largest: dict[str, int] = field(default_factory=dict)
    _unclassified: set[str] = field(default_factory=set)
    _tasks: dict[str, TaskProcess] = field(default_factory=dict)
    _ended: list[TaskProcess] = field(default_factory=list)

    def _members(self) -> list[psutil.Process]:
        found: list[psutil.Process] = []
        for pid in [self.root_pid, *self.also()]:
            with contextlib.suppress(psutil.NoSuchProcess):
                root = psutil.Process(pid)
                found += [root, *root.children(recursive=True)]
        return found

    def look(self, with_pss: bool = False) -> dict[str, RoleLook]:
        """One pass over the tree: register each process, sum each role's RSS (and PSS ``with_pss``), and keep
        each role's RSS as a peak until the next :meth:`take`."""
        by_role: dict[str, RoleLook] = {}
        now = time.time()
        for process in self._members():
            with contextlib.suppress(psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
                if process.status() == psutil.STATUS_ZOMBIE:
                    continue
                command = " ".join(process.cmdline())
                if not command:  # a process between fork and exec, or exiting
                    continue
                role = classify(command)
                memory = process.memory_full_info() if with_pss else process.memory_info()
                pss: int | None = getattr(memory, "pss", None)
                created = process.create_time()
                self.seen[(process.pid, created)] = SeenProcess(role, command[:300])
                if role == OTHER:
                    self._unclassified.add(command[:200])
                look = by_role.setdefault(role, RoleLook())
                look.processes += 1
                look.rss_bytes += memory.rss
                look.largest_rss_bytes = max(look.largest_rss_bytes, memory.rss)
                if now - created >= LONG_LIVED_S:
                    look.long_lived_rss_bytes += memory.rss
                    look.long_lived_pids.append(process.pid)
                look.pss_bytes = None if pss is None or look.pss_bytes is None else look.pss_bytes + pss
                if (task := TASK_TITLE.search(command)) is not None:
                    self._task_seen(task.group(1), now, memory.rss)
        self._tasks_gone(now)
        for role, look in by_role.items():
            self._peaks[role] = max(self._peaks.get(role, 0), look.rss_bytes)
            self._largest[role] = max(self._largest.get(role, 0), look.largest_rss_bytes)
        return by_role

    def _task_seen(self, ti_id: str, now: float, rss: int) -> None:
        seen = self._tasks.setdefault(ti_id, TaskProcess(ti_id, now, now, 0))
        seen.last_seen, seen.peak_rss_bytes = now, max(seen.peak_rss_bytes, rss)

    def _tasks_gone(self, now: float) -> None:
        for ti_id in [t for t, seen in self._tasks.items() if seen.last_seen < now]:
            self._ended.append(self._tasks.pop(ti_id))

    def ended_tasks(self) -> list[TaskProcess]:
        """The task processes gone since the previous call."""
        ended, self._ended = self._ended, []
        return ended

    def running_tasks(self) -> list[TaskProcess]:
        """The task processes seen at the last look."""
        return list(self._tasks.values())

    def take(self) -> tuple[dict[str, RoleMemory], list[str], list[str]]:
        """A sample: per role the processes, RSS and PSS now and the RSS peak since the previous sample; the roles
        seen since then; the command lines no role matched. Starts the next interval's peaks."""
        looked = self.look(with_pss=True)
        roles = {role: RoleMemory(look.processes, look.rss_bytes, look.pss_bytes, self._peaks[role],
                                  look.long_lived_rss_bytes, sorted(look.long_lived_pids), self._largest[role])
                 for role, look in looked.items()}
        for role, peak in self._peaks.items():  # came and went between samples (a task)
            roles.setdefault(role, RoleMemory(0, 0, 0, peak, 0, [], self._largest[role]))
        unclassified = sorted(self._unclassified)
        self._peaks.clear()
        self._largest.clear()
        self._unclassified.clear()
        return dict(sorted(roles.items())), sorted(roles), unclassified

    def still_running(self) -> list[tuple[psutil.Process, SeenProcess]]:
        """Every process ever seen that still runs (the same process: pid and create time)."""
        alive = []
        for (pid, created), seen in self.seen.items():
            with contextlib.suppress(psutil.NoSuchProcess, psutil.ZombieProcess):
                process = psutil.Process(pid)
                if process.create_time() == created and process.status() != psutil.STATUS_ZOMBIE:
                    alive.append((process, seen))
        return alive
