"""The injectors: one function per fault kind, each doing what the plan says to the platform and returning a record
of what it did (its target, when it began and ended) or why it could not (the target was not there).

Each runs in a thread of its own (a pause lasts a minute), and two faults never act on one target at once: a fault
whose target is busy waits for it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import psutil

from streamwarden.runfiles.heartbeat import read_heartbeat
from streamwarden.warden.limits import ProgressLimit, progress_limit
from streamwarden.warden.settings import load_warden_settings

from .operator_faults import as_expected, recover, upgrade
from .plan import FaultKind, Planned
from .targets import Platform, TargetMissingError, process_info
from .traffic import SITES, send_malformed

MAINTENANCE_DAG = "maintain_tables"
TASK_OF = {FaultKind.KILL_COMPACTION: "compact_and_prove", FaultKind.KILL_VACUUM: "vacuum_and_checkpoint"}
TASK_WAIT_S = 240.0
"""Longest wait for a triggered maintenance run to reach the task a kill aims at."""
STREAM_WAIT_S = 180.0
"""Longest a kill waits for a stream to kill (the warden's restart after the previous fault, with its backoff)."""
FIRST_BATCH_WAIT_S = 300.0
"""Longest a hang fault waits for the stream's first batch (before it, the warden allows the start-up grace)."""


@dataclass
class Injection:
    """What one planned fault did."""

    index: int
    kind: str
    planned_s: float
    began_s: float
    ended_s: float | None = None
    target: str = ""
    injected: bool = False
    why_not: str = ""
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


Clock = Callable[[], float]


class Injector:
    """Runs planned faults against one platform."""

    def __init__(self, platform: Platform, clock: Clock, say: Callable[[str], None]) -> None:
        self.platform = platform
        self.clock = clock
        self.say = say
        self.locks = {name: threading.Lock() for name in ("stream", "broker", "scheduler", "triggerer",
                                                           "maintenance")}
        self.warden = load_warden_settings()
        self.stopping = threading.Event()  # set before the stop: every wait ends, every paused process resumes
        self.killed: set[int] = set()  # lease holders a fault killed

    @contextmanager
    def _holding(self, target: str) -> Iterator[None]:
        """The target to this fault alone, once the fault before on it is done; none once the soak is stopping."""
        lock = self.locks[target]
        while not lock.acquire(timeout=1):
            if self.stopping.is_set():
                raise TargetMissingError("the soak was stopping")
        try:
            if self.stopping.is_set():
                raise TargetMissingError("the soak was stopping")
            yield
        finally:
            lock.release()

    def run(self, planned: Planned) -> Injection:
        kind = FaultKind(planned.kind)
        record = Injection(planned.index, kind.value, planned.at_s, self.clock())
        action = {
            FaultKind.KILL_STREAM: self._kill_stream, FaultKind.HANG_STREAM: self._hang_stream,
            FaultKind.PAUSE_BROKER: self._pause_broker, FaultKind.KILL_COMPACTION: self._kill_task,
            FaultKind.KILL_VACUUM: self._kill_task, FaultKind.KILL_SCHEDULER: self._kill_component,
            FaultKind.KILL_TRIGGERER: self._kill_component, FaultKind.MALFORMED_BURST: self._malformed,
            FaultKind.RECOVER_STREAM: self._operator, FaultKind.UPGRADE_RELEASE: self._operator,
            FaultKind.UPGRADE_FAILING: self._operator,
        }[kind]
        try:
            action(planned, record)
        except (TargetMissingError, psutil.Error, OSError) as exc:
            record.why_not = f"{type(exc).__name__}: {exc}"
        record.ended_s = self.clock()
        self.say(f"fault {planned.index} {kind.value}: "
                 f"{'injected on ' + record.target if record.injected else 'not injected: ' + record.why_not}")
        return record

    # --- the stream --------------------------------------------------------------------------------------
    def _kill_stream(self, planned: Planned, record: Injection) -> None:
        """kill -9 of the stream's process group; between a death and the warden's restart, of the next stream."""
        with self._holding("stream"):
            holder = self._next_stream()
            group = self.platform.stream_group()
            record.target = f"stream process group {group} (lease holder {holder})"
            record.began_s = self.clock()
            os.killpg(group, signal.SIGKILL)
            record.injected = True
            self.killed.add(holder)  # a kill right after must not find this dying process and count twice

    def _next_stream(self) -> int:
        """The lease holder of a live stream no fault killed yet, waiting up to STREAM_WAIT_S for one (between a
        death and the warden's restart, with its backoff)."""
        deadline = time.monotonic() + STREAM_WAIT_S
        while True:
            if self._stream_alive() and (pid := self.platform.stream_pid()) not in self.killed:
                return pid
            if time.monotonic() > deadline or self.stopping.wait(1):
                raise TargetMissingError(f"no stream (other than one already killed) within {STREAM_WAIT_S:.0f} s")

    def _hang_stream(self, planned: Planned, record: Injection) -> None:
        """SIGSTOP of every process of the stream (a frozen host) for longer than the warden's hang limit of the
        moment, then SIGCONT. A stream whose first batch is pending has the start-up grace instead of a hang limit:
        the fault waits for that batch."""
        with self._holding("stream"):
            limit = self._progressing_limit()
            group = self.platform.stream_group()
            hold = limit.seconds + float(planned.params.get("extra_s", 30))
            record.target = f"stream process group {group}"
            record.detail = {"hold_s": round(hold, 1), "hang_limit": limit.describe()}
            record.began_s = self.clock()
            os.killpg(group, signal.SIGSTOP)
            record.injected = True
            self.stopping.wait(hold)
            with contextlib.suppress(ProcessLookupError):  # the warden killed it meanwhile
                os.killpg(group, signal.SIGCONT)

    def _progressing_limit(self) -> ProgressLimit:
        """The hang limit of the lease holder once it has committed a batch (waits for it, up to FIRST_BATCH_WAIT_S)."""
        deadline = time.monotonic() + FIRST_BATCH_WAIT_S
        while time.monotonic() < deadline and not self.stopping.is_set():
            pid = self.platform.stream_pid() if self._stream_alive() else None
            heartbeat = read_heartbeat(self.platform.settings.run_paths.heartbeat)
            if pid is not None and heartbeat is not None and heartbeat.pid == pid and heartbeat.batch_id is not None:
                return progress_limit(heartbeat, self.platform.settings.trigger_interval, self.warden)
            time.sleep(1)
        raise TargetMissingError(f"no stream committed a batch within {FIRST_BATCH_WAIT_S:.0f} s")

    def _stream_alive(self) -> bool:
        try:
            self.platform.stream_pid()
        except TargetMissingError:
            return False
        return True

    # --- the broker -------------------------------------------------------------------------------------
    def _pause_broker(self, planned: Planned, record: Injection) -> None:
        with self._holding("broker"):
            broker = self.platform.one("broker")
            pause = float(planned.params.get("pause_s", 60))
            record.target = f"broker pid {broker.pid}"
            record.detail = {"pause_s": pause}
            record.began_s = self.clock()
            broker.suspend()
            record.injected = True
            try:
                self.stopping.wait(pause)
            finally:
                broker.resume()

    # --- Airflow's components ------------------------------------------------------------------------------
    def _kill_component(self, planned: Planned, record: Injection) -> None:
        component = "scheduler" if planned.kind == FaultKind.KILL_SCHEDULER else "triggerer"
        with self._holding(component):
            process = self.platform.one(f"airflow-{component}")
            info = process_info(process, component)
            children = process.children(recursive=True)
            record.target = f"airflow {component} pid {process.pid}"
            record.began_s = self.clock()
            process.kill()
            record.injected = True
            _wait_dead(process)
            # what a process supervisor does before it starts the component again (systemd's control group):
            # the dead component's children (the LocalExecutor's workers, log servers) go too
            for child in children:
                with contextlib.suppress(psutil.NoSuchProcess):
                    child.kill()
            down = float(planned.params.get("down_s", 10))
            self.stopping.wait(down)
            again = self.platform.restart_like(info, component)
            record.detail = {"down_s": down, "restarted_pid": again.pid, "children_killed": len(children)}

    def _kill_task(self, planned: Planned, record: Injection) -> None:
        """Trigger maintain_tables and kill -9 its task while it runs the step the plan aims at.

        The task instance's id is read from the API as soon as the run has it (queued); its process is then looked
        for locally every 0.1 s (the API answers in seconds on a busy machine, a task with little to do runs for
        about as long)."""
        task_id = TASK_OF[FaultKind(planned.kind)]
        with self._holding("maintenance"):
            run_id = self.platform.trigger(MAINTENANCE_DAG, {}, f"soak fault {planned.index}: kill -9 of {task_id}")
            record.detail = {"dag_run": run_id, "task_id": task_id}
            deadline = time.monotonic() + TASK_WAIT_S
            ti_id: str | None = None
            next_api_look = 0.0
            while time.monotonic() < deadline and not self.stopping.is_set():
                if time.monotonic() >= next_api_look:
                    next_api_look = time.monotonic() + 2
                    ti = {t["task_id"]: t for t in self.platform.task_instances(MAINTENANCE_DAG, run_id)}.get(task_id)
                    if ti is not None and ti.get("state") in ("success", "failed", "skipped", "upstream_failed"):
                        raise TargetMissingError(f"{task_id} of {run_id} ended ({ti.get('state')}) before its "
                                                 "process was seen")
                    ti_id = str(ti["id"]) if ti is not None else None
                process = self.platform.task_process(ti_id) if ti_id is not None else None
                if process is not None and self._kill_tree(process, float(planned.params.get("delay_s", 0))):
                    record.target = f"{MAINTENANCE_DAG} {run_id} {task_id} pid {process.pid}"
                    record.began_s = self.clock()
                    record.injected = self._ended_by_the_kill(run_id, task_id)
                    if not record.injected:
                        record.why_not = f"{task_id} had done its work: Airflow recorded its success as it was killed"
                    return
                time.sleep(0.1)
            raise TargetMissingError(f"{task_id} of {run_id} did not run within {TASK_WAIT_S:.0f} s")

    def _ended_by_the_kill(self, run_id: str, task_id: str) -> bool:
        """False when the task instance ends in success anyway: the kill came after its work (its last second)."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not self.stopping.wait(1):
            ti = {t["task_id"]: t for t in self.platform.task_instances(MAINTENANCE_DAG, run_id)}.get(task_id)
            if ti is not None and ti.get("state") not in ("running", "queued", "scheduled", None):
                return ti.get("state") != "success"
        return True

    @staticmethod
    def _kill_tree(process: psutil.Process, delay_s: float) -> bool:
        """kill -9 of a task's process and its children after ``delay_s``; False when it ended first."""
        time.sleep(delay_s)
        try:
            members = [*process.children(recursive=True), process]
            process.kill()
        except psutil.NoSuchProcess:
            return False
        for member in members:
            with contextlib.suppress(psutil.NoSuchProcess):
                member.kill()
        return True

    # --- an operator's runs ---------------------------------------------------------------------------------
    def _operator(self, planned: Planned, record: Injection) -> None:
        """A recovery or an upgrade, with the stream to itself: a kill or hang of the stream waits for its end (the
        run is judged by how it ended, which a fault of the stream in its middle would decide instead)."""
        kind = FaultKind(planned.kind)
        with self._holding("stream"):
            record.began_s = self.clock()
            record.target = kind.value
            record.injected = True
            if kind == FaultKind.RECOVER_STREAM:
                try:
                    record.detail = recover(self.platform, planned.index, self.stopping)
                except TargetMissingError:
                    record.injected = False
                    raise
            else:
                record.detail = upgrade(self.platform, planned.index, self.stopping,
                                        failing=kind == FaultKind.UPGRADE_FAILING)
            record.target = f"{record.detail.get('dag_run')} ({record.detail.get('state')})"
            record.detail["as_expected"] = as_expected(record.detail)

    # --- input ------------------------------------------------------------------------------------------
    def _malformed(self, planned: Planned, record: Injection) -> None:
        topic = f"sites-{int(planned.params.get('site', 0)) % SITES}"
        records = int(planned.params.get("records", 10))
        record.target = topic
        record.began_s = self.clock()
        sent = send_malformed(self.platform.settings, topic, records, f"f{planned.index}")
        record.detail = {"records": records, "landed": sent.offsets, "errors": sent.errors}
        record.injected = bool(sent.offsets)
        if not sent.offsets:
            record.why_not = f"no record landed: {sent.errors[:3]}"


def _wait_dead(process: psutil.Process, timeout: float = 30) -> None:
    """Until ``process`` is gone or a zombie (its parent, not us, reaps it: `airflow standalone` reaps a component
    only once its output pipe closes)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.2)
