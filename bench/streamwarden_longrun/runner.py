"""One long run: `up` and the burn started, a look every two seconds and a sample every interval, then the stop.

Each look registers `up`'s processes (every one must be gone after the stop) and notices the stream starting,
ending and failing; each sample adds memory per role, disk per area, ``streamwarden status``, the stream's new
commits and Airflow's new red runs, and is appended to ``samples.jsonl`` at once. At the deadline (or on
Ctrl-C / SIGTERM to this program) `up` gets SIGINT, as from a person at its terminal; the looks go on while
it drains and stops, and any process of it still alive afterwards is recorded and killed.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

import psutil
from streamwarden_bench.source import state

from streamwarden.local.broker import LOOPBACK
from streamwarden.local.broker_memory import default_limit
from streamwarden.secrets import scrub
from streamwarden.settings import Settings, load_settings
from streamwarden.settings_loading import ENV_PREFIX
from streamwarden.warden.status import read_status

from .census import Census, TaskProcess
from .dag_runs import DagRunPoller, DagRunWatch
from .disk import DiskAreas
from .processes import CpuBurn, kill_all, start_up
from .records import MIB, Event, EventType, RunInfo, Sample, SampleFile
from .stream_watch import DeltaCommits, Noticed, StreamWatch

LOOK_S = 2.0
"""Between looks at the processes and the stream's files: a task runs for several seconds, and a look costs about
20 ms of CPU (psutil finds a tree's members by reading every process's parent on the machine)."""
LAST_API_LOOK_S = 90.0
"""At most this long for the API's last look at the runs before the SIGINT (its client waits 30 s a call)."""
RUN_FILES = ("alerts.jsonl", "last_failure.json", "previous_failure.json", "warden/restarts.json",
             "warden/health.json", "maintenance/history.jsonl")
"""Small files of the home's run folder kept with the results (the home itself is deleted after a passing run)."""
MAX_COPIED_BYTES = 2 * 2**20
LAUNCH_LOG_TAIL_LINES = 200


@dataclass(frozen=True)
class LongRunOptions:
    minutes: float
    interval_s: float
    burn_cores: int
    producer_rate: float
    warmup_minutes: float
    flat_mib_per_hour: float
    stop_timeout_s: float
    api_port: int
    home: Path
    results: Path
    up_producer: bool = True  # False: `up --no-producer` (the soak drives its own)
    settings: dict[str, str] = field(default_factory=dict)  # STREAMWARDEN_* for `up`, over the environment's


class RunHooks(Protocol):
    """What a program built on the long run (the soak) does at its start, at each look, and before the stop."""

    def started(self, run: LongRun, up: subprocess.Popen[bytes]) -> None: ...

    def look(self, elapsed_s: float) -> None: ...

    def before_stop(self, reason: str, look: Callable[[], None], say: Callable[[str], None]) -> None: ...

    def platform_roots(self) -> list[int]:
        """Processes of the platform outside `up`'s tree (counted, sampled and checked for leftovers like its own)."""


def _now() -> str:
    return datetime.now(UTC).isoformat()


class _StopRequestedError(Exception):
    """SIGTERM to the long run: stop the platform as on the deadline."""


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _StopRequestedError


@contextmanager
def _ignoring_interrupts() -> Iterator[None]:
    """While the platform stops: a second Ctrl-C must not leave it half stopped."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN), signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])


class LongRun:
    """The run's state between looks; :meth:`run` is the whole of it."""

    def __init__(self, options: LongRunOptions, hooks: RunHooks | None = None) -> None:
        self.options = options
        self.hooks = hooks
        self.settings: Settings = load_settings(home=options.home)
        self.areas = DiskAreas(self.settings)
        self.stream = StreamWatch(self.settings)
        self.commits = DeltaCommits(self.settings)
        self.dag_runs = DagRunWatch(f"http://{LOOPBACK}:{options.api_port}", self.settings.home_paths.airflow)
        self.poller = DagRunPoller(self.dag_runs, options.interval_s)
        self.out = SampleFile(options.results / "samples.jsonl")
        self.own = psutil.Process()
        self.started = time.monotonic()
        self.started_epoch = time.time()

    def run(self, say: Callable[[str], None] = print) -> Path:
        """Run the platform for ``minutes`` and return the samples file."""
        options = self.options
        options.results.mkdir(parents=True, exist_ok=True)
        options.home.mkdir(parents=True, exist_ok=True)
        up_log = options.results / "up.log"
        previous_term = signal.signal(signal.SIGTERM, _raise_stop)
        burn = CpuBurn(options.burn_cores)
        try:
            with self.out:
                up = start_up(options.home, options.api_port, options.producer_rate if options.up_producer else None,
                              up_log, options.settings)
                self.started, self.started_epoch = time.monotonic(), time.time()
                self.out.write(self._info())
                self._event(EventType.UP_STARTED, {"pid": up.pid, "log": str(up_log)})
                say(f"up (pid {up.pid}) on home {options.home}, API port {options.api_port}, "
                    f"{options.burn_cores} core(s) burnt; samples to {self.out.path}")
                census = Census(up.pid, self.hooks.platform_roots if self.hooks is not None else list)
                if self.hooks is not None:
                    self.hooks.started(self, up)
                reason = "the long run itself failed"  # unless the watch returns: the platform is stopped anyway
                try:
                    self.poller.start()
                    reason = self._watch(up, census, say)
                finally:
                    self._stop(up, census, reason, say)
        finally:
            burn.stop()
            signal.signal(signal.SIGTERM, previous_term)
        self._keep_run_files()
        return self.out.path

    # --- the run ---------------------------------------------------------------------------------------
    def _watch(self, up: subprocess.Popen[bytes], census: Census, say: Callable[[str], None]) -> str:
        """Looks and samples until the deadline; why it ended."""
        deadline = self.started + self.options.minutes * 60
        next_sample = self.started + self.options.interval_s
        next_line = self.started + 300
        try:
            while time.monotonic() < deadline:
                if up.poll() is not None:
                    self._event(EventType.PLATFORM_EXITED, {"exit_code": up.returncode})
                    say(f"up exited with code {up.returncode} before the deadline")
                    return "platform exited"
                census.look()
                self._tasks_ended(census.ended_tasks())
                self._record(self.stream.look(stopping=False))
                self._record(self.poller.drain())
                if self.hooks is not None:
                    self.hooks.look(time.monotonic() - self.started)
                if time.monotonic() >= next_sample:
                    sample = self._sample(census)
                    next_sample = max(next_sample + self.options.interval_s, time.monotonic() + 1)
                    if time.monotonic() >= next_line:
                        next_line += 300
                        say(self._progress_line(sample))
                time.sleep(max(0.0, LOOK_S - (time.monotonic() - self.started) % LOOK_S))
        except (KeyboardInterrupt, _StopRequestedError):
            say("interrupted: stopping the platform (the report is written from what was sampled)")
            return "interrupted"
        return "deadline"

    def _stop(self, up: subprocess.Popen[bytes], census: Census, reason: str, say: Callable[[str], None]) -> None:
        """SIGINT to `up`, looks until it exits (or the stop timeout: SIGKILL), then processes left behind."""
        with _ignoring_interrupts():
            if self.hooks is not None and up.poll() is None:
                try:
                    self.hooks.before_stop(reason, lambda: self._look_while_waiting(census), say)
                except Exception as exc:  # the platform is stopped whatever the hook does
                    say(f"before the stop: {type(exc).__name__}: {exc}")
            if up.poll() is None:
                try:
                    self._sample(census)  # the run's last figures, and the commits since the previous sample
                except Exception as exc:  # the platform is stopped whatever the last sample does
                    say(f"the last sample failed: {type(exc).__name__}: {exc}")
            self._event(EventType.STOPPING, {"reason": reason})
            # The API's last word on the runs while it still answers (tens of seconds on a busy machine); the
            # stream is still watched meanwhile, as before the stop.
            self.poller.finish(last_look=up.poll() is None)
            asked = time.monotonic()
            while not self.poller.finished() and time.monotonic() - asked < LAST_API_LOOK_S:
                census.look()
                self._record(self.stream.look(stopping=False))
                time.sleep(LOOK_S)
            self._record(self.poller.drain())
            self._name_tasks(say)
            say(f"stopping up with SIGINT ({reason})")
            began = time.monotonic()
            if up.poll() is None:
                up.send_signal(signal.SIGINT)
            while up.poll() is None and time.monotonic() - began < self.options.stop_timeout_s:
                census.look()
                self._record(self.stream.look(stopping=True))
                time.sleep(LOOK_S)
            killed = up.poll() is None
            if killed:
                kill_all(census_processes(up.pid))
                up.kill()
                self._event(EventType.KILLED, {"after_s": round(time.monotonic() - began, 1)})
            code = up.wait()
            census.look()
            self._tasks_ended(census.ended_tasks() + census.running_tasks())
            self._record(self.stream.look(stopping=True))
            self._event(EventType.STOPPED, {"exit_code": code, "stop_s": round(time.monotonic() - began, 1)})
            say(f"up exited with code {code} after {time.monotonic() - began:.0f}s")
            left = census.still_running()
            for process, seen in left:
                self._event(EventType.LEFTOVER, {"pid": process.pid, "role": seen.role, "command": seen.command})
            if left:
                say(f"{len(left)} process(es) left behind; killing them: {[process.pid for process, _ in left]}")
                kill_all([process for process, _ in left])

    def _look_while_waiting(self, census: Census) -> None:
        census.look()
        self._record(self.stream.look(stopping=False))
        self._record(self.poller.drain())

    def _sample(self, census: Census) -> Sample:
        began = time.monotonic()
        roles, roles_seen, unclassified = census.take()
        disk = self.areas.measure()
        status = read_status(self.settings)
        commit_times = self.commits.new_commit_times()
        sample = Sample(
            at=_now(), elapsed_s=round(began - self.started, 1), roles=roles, roles_seen=roles_seen,
            unclassified=unclassified, disk_bytes=disk, disk_free_bytes=self.areas.free_bytes(),
            machine_available_bytes=psutil.virtual_memory().available,
            load_average=[round(value, 2) for value in os.getloadavg()],
            stream_running=status.running, stream_pid=status.pid, last_batch_id=status.last_batch_id,
            heartbeat_age_s=status.heartbeat_age_s, commit_times=commit_times,
            sample_ms=round((time.monotonic() - began) * 1000, 1), own_cpu_s=round(sum(self.own.cpu_times()[:2]), 2))
        self.out.write(sample)
        return sample

    # --- records ---------------------------------------------------------------------------------------
    def _info(self) -> RunInfo:
        options = self.options
        return RunInfo(
            started_at=_now(), minutes=options.minutes, interval_s=options.interval_s,
            warmup_minutes=options.warmup_minutes, flat_mib_per_hour=options.flat_mib_per_hour,
            burn_cores=options.burn_cores, producer_rate=options.producer_rate, home=str(options.home),
            api_port=options.api_port, results=str(options.results), host=socket.gethostname(),
            cpus=os.cpu_count() or 0, machine_ram_bytes=psutil.virtual_memory().total, source=state(),
            command=sys.argv, broker_memory_limit_bytes=default_limit(),
            settings_given=sorted(n for n in os.environ if n.startswith(ENV_PREFIX) and n != f"{ENV_PREFIX}HOME"))

    def _event(self, kind: EventType, detail: dict[str, Any]) -> None:
        self.out.write(Event(_now(), round(time.monotonic() - self.started, 1), kind, detail))

    def _record(self, noticed: list[Noticed]) -> None:
        for item in noticed:
            self._event(item.type, item.detail)

    def _tasks_ended(self, tasks: list[TaskProcess]) -> None:
        for task in tasks:
            self._event(EventType.TASK_ENDED, {
                "ti_id": task.ti_id, "started_s": round(task.first_seen - self.started_epoch, 1),
                "ran_s": round(task.last_seen - task.first_seen, 1), "peak_rss_bytes": task.peak_rss_bytes})

    def _name_tasks(self, say: Callable[[str], None]) -> None:
        """Which DAG's task each task instance was, while the API still answers (tasks are judged by kind)."""
        if not self.dag_runs.ready():
            return
        try:
            self._event(EventType.TASK_NAMES, {"names": self.dag_runs.task_names()})
        except (OSError, RuntimeError, ValueError, KeyError) as exc:
            self._event(EventType.API_ERROR, {"error": f"task names: {type(exc).__name__}: {str(exc)[:500]}"})
            say(f"the task instances could not be named: {exc}")

    def _progress_line(self, sample: Sample) -> str:
        total = sum(memory.rss_bytes for memory in sample.roles.values()) / MIB
        broker = sample.roles["broker"].rss_bytes / MIB if "broker" in sample.roles else 0.0
        return (f"{sample.elapsed_s / 60:5.1f} min: stream {'running' if sample.stream_running else 'NOT running'}"
                f" (batch {sample.last_batch_id}), platform RSS {total:,.0f} MiB (broker {broker:,.0f} MiB), "
                f"stream deaths so far {len(self.stream.deaths)}, red runs so far {len(self.dag_runs.red_runs)}")

    def _keep_run_files(self) -> None:
        """Copy the home's small run files, validate_output's reports, and the tail of each stream launch log,
        next to the samples; the Airflow admin password (which `up` prints) masked in them and in ``up.log``: results
        are meant to be committed."""
        passwords = self.dag_runs.passwords()
        run_root = self.settings.root("run")
        target = self.options.results / "run-files"
        copies = [(run_root / name, target / name) for name in RUN_FILES]
        paths = self.settings.run_paths
        copies += [(log, target / f"{log.name}.tail") for log in sorted(paths.logs.glob("stream-*.log"))]
        copies += [(report, target / "validation" / report.name)  # what each validation read, found and took
                   for report in sorted(paths.validation.glob("*.json"))]
        for source, copy in copies:
            if not source.is_file() or (source.suffix != ".log" and source.stat().st_size > MAX_COPIED_BYTES):
                continue
            lines = source.read_text(errors="replace").splitlines()
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_text(scrub("\n".join(lines[-LAUNCH_LOG_TAIL_LINES:] if source.suffix == ".log" else lines)
                                  + "\n", passwords))
        up_log = self.options.results / "up.log"
        if up_log.is_file():
            up_log.write_text(scrub(up_log.read_text(errors="replace"), passwords))


def census_processes(root_pid: int) -> list[psutil.Process]:
    """`up` and its descendants now (to kill when it does not stop)."""
    try:
        root = psutil.Process(root_pid)
        return [*root.children(recursive=True), root]
    except psutil.NoSuchProcess:
        return []
