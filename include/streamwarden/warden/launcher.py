"""Start the stream detached from the caller, so no Airflow task holds a slot for the stream's lifetime.

The stream runs as ``spark-submit jobs/stream.py`` in a session of its own (``start_new_session``): the
caller may exit at once, and signals to the caller's process group never reach the stream. Output goes
to a log file under ``<run_root>/logs``. Each launch is recorded in ``<run_root>/launch.json`` so that a
stop can still find a stream that has not taken the lease yet.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import psutil

import streamwarden
from streamwarden.atomic import read_json, write_json_atomic
from streamwarden.failures import EXIT_ALREADY_RUNNING
from streamwarden.logs.bounds import LogBounds
from streamwarden.logs.pruning import prune_logs
from streamwarden.process_setup import launch_env
from streamwarden.runfiles.hold import refuse_if_held
from streamwarden.runfiles.lease import LeaseHolder, describe_holder, is_held, read_holder
from streamwarden.settings import SECRET_FIELDS, Settings
from streamwarden.settings_loading import CONFIG_FILE_ENV, ENV_PREFIX, read_config_file

REPO_ENV = "STREAMWARDEN_REPO"
CommandBuilder = Callable[[Settings, Path], list[str]]
"""Builds the argv that runs ``application`` (the job script) with the given settings."""


class LaunchError(RuntimeError):
    """The stream could not be started."""


class StreamAlreadyRunningError(LaunchError):
    """A live process holds the checkpoint lease."""

    def __init__(self, holder: LeaseHolder | None) -> None:
        self.holder = holder
        super().__init__(f"the stream is already running ({describe_holder(holder)})")


class StreamLaunchFailedError(LaunchError):
    """The launched process died, or did not take the lease in time."""

    def __init__(self, message: str, log_path: Path, exit_code: int | None, tail: str | None = None) -> None:
        self.reason = message
        self.log_path = log_path
        self.exit_code = exit_code
        self.tail = log_tail(log_path) if tail is None else tail  # a stream host sends the tail of its own log
        super().__init__(f"{message}; log {log_path}:\n{self.tail}")


@dataclass(frozen=True)
class LaunchRecord:
    """The last launched stream process group (its leader is the spark-submit process)."""

    pid: int
    create_time: float
    command: list[str]
    log_path: str
    launched_at: str
    host: str = ""  # empty in a record written before launches named their host: this host
    via: str = "local"  # "ssh <client> <port> -> <server> <port>" when a stream host launched it for a warden

    def on_this_host(self) -> bool:
        return not self.host or self.host == socket.gethostname()

    def leader_alive(self) -> bool:
        """True while the launched leader process (the same one, not a reused pid) still runs on this host (a
        leader a stream host launched elsewhere cannot be seen from here: False)."""
        if not self.on_this_host():
            return False
        try:
            process = psutil.Process(self.pid)
            return (abs(process.create_time() - self.create_time) < 0.01
                    and process.status() != psutil.STATUS_ZOMBIE)
        except psutil.NoSuchProcess:
            return False


def repo_root() -> Path:
    """The Streamwarden checkout (``dags/``, ``jobs/``, ``plugins/``): ``$STREAMWARDEN_REPO`` or the
    folder two levels above the ``streamwarden`` package (an editable install)."""
    configured = os.environ.get(REPO_ENV)
    root = Path(configured) if configured else Path(streamwarden.__file__).resolve().parents[2]
    if not (root / "jobs" / "stream.py").is_file() or not (root / "dags").is_dir():
        raise FileNotFoundError(
            f"{root} is not a Streamwarden checkout (no jobs/stream.py and dags/); set {REPO_ENV}"
        )
    return root.absolute()


def venv_bin() -> Path:
    """The folder of this interpreter's scripts (``spark-submit``, ``airflow``)."""
    return Path(sys.executable).parent


def spark_submit_command(settings: Settings, application: Path) -> list[str]:
    """The default command: this environment's ``spark-submit`` on ``settings.spark_master``."""
    return [str(venv_bin() / "spark-submit"), "--master", settings.spark_master, "--name",
            settings.query_name, str(application)]


def read_launch_record(settings: Settings, standby: bool = False) -> LaunchRecord | None:
    """The last launch of the stream (or of its warm standby)."""
    document = read_json(settings.run_paths.standby_launch if standby else settings.run_paths.launch)
    return None if document is None else LaunchRecord(**document)


def starting_launch(settings: Settings, now: float, grace: float) -> LaunchRecord | None:
    """The last launch while it is still starting: its leader runs, less than ``grace`` seconds have passed since
    it was launched, and its process group has not taken the lease yet. A group whose driver held the lease and
    lost it has stopped, whatever its leader still does (spark-submit outlives a killed driver for a moment).
    A launch on another host (a stream host) counts as running for the grace: its leader cannot be seen."""
    launch = read_launch_record(settings)
    if launch is None or not (launch.leader_alive() or not launch.on_this_host()) or \
            now - datetime.fromisoformat(launch.launched_at).timestamp() > grace:
        return None
    holder = read_holder(settings.lease_path)
    if holder is not None and holder.host == (launch.host or socket.gethostname()) and holder.pgid == launch.pid:
        return None
    return launch


def running_holder(settings: Settings) -> LeaseHolder | None:
    """The lease holder when the stream is running right now, else ``None``."""
    return _live_holder(settings.lease_path)


def running_standby(settings: Settings) -> LeaseHolder | None:
    """The warm standby waiting for the lease right now (it holds the standby lease), else ``None``."""
    return _live_holder(settings.standby_lease_path)


def _live_holder(path: Path) -> LeaseHolder | None:
    holder = read_holder(path)
    if holder is not None and is_held(path) and holder.is_alive():
        return holder
    return None


def stream_env(settings: Settings, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The stream's environment: ``base`` without Airflow's or stale Streamwarden variables, plus the
    settings, what spark-submit reads before the job runs (:func:`~streamwarden.process_setup.launch_env`),
    this interpreter for PySpark and this environment's scripts first on ``PATH``.

    A secret setting (storage options, Spark or Kafka configuration) that ``base``'s config file
    (``STREAMWARDEN_CONFIG_FILE``) holds stays there: the file is passed on, the value is not copied into the
    environment, where every process of the user could read it."""
    source = os.environ if base is None else base
    env = {k: v for k, v in source.items() if not k.startswith(("AIRFLOW", ENV_PREFIX))}
    env.update(settings.to_env())
    if source.get(CONFIG_FILE_ENV):
        env[CONFIG_FILE_ENV] = source[CONFIG_FILE_ENV]
    env = without_file_secrets(env, source)
    env.update(launch_env(settings, source))
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    env["PATH"] = os.pathsep.join([str(venv_bin()), env.get("PATH", os.defpath)])
    return env


def without_file_secrets(env: Mapping[str, str], source: Mapping[str, str]) -> dict[str, str]:
    """``env`` without the variables of the secret settings that ``source``'s config file holds."""
    held = {f"{ENV_PREFIX}{name.upper()}" for name in SECRET_FIELDS & set(read_config_file(source))}
    return {k: v for k, v in env.items() if k not in held}


def platform_env(settings: Settings, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of the platform's own processes (Airflow, the demo producer): the stream's, plus every
    other ``STREAMWARDEN_*`` setting of ``base`` (the warden's, maintenance's, validation's, the restarts'...),
    which their DAGs read in Airflow's processes."""
    source = os.environ if base is None else base
    return {**{k: v for k, v in source.items() if k.startswith(ENV_PREFIX)}, **stream_env(settings, source)}


def log_tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a log file (empty when there is none)."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def start_stream_detached(
    settings: Settings,
    log_path: Path | None = None,
    *,
    build_command: CommandBuilder = spark_submit_command,
    application: Path | None = None,
    lease_timeout: float = 180.0,
    standby: bool = False,
) -> int:
    """Launch the stream in a new session and return the pid of its driver (the lease holder); with
    ``standby``, a warm standby beside the running stream, and its pid once it holds the standby lease.

    Raises :class:`~streamwarden.runfiles.hold.StreamHeldError` while a recovery or an upgrade holds the
    stream, :class:`StreamAlreadyRunningError` when a live process holds the lease (the standby lease for a
    standby; also when another launch wins the race), and :class:`StreamLaunchFailedError` when the process
    dies before taking the lease or does not take it within ``lease_timeout`` seconds (then its process group
    is killed).
    """
    prune_logs(LogBounds.of(settings))
    refuse_if_held(settings, "starting the stream's standby" if standby else "starting the stream")
    holder = running_standby(settings) if standby else running_holder(settings)
    if holder is not None:
        raise StreamAlreadyRunningError(holder)
    if not standby:
        settings.run_paths.stop_marker.unlink(missing_ok=True)  # stale: nothing runs that could drain
    if log_path is None:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        log_path = settings.run_paths.stream_log(f"{stamp}-standby" if standby else stamp)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    settings.home.mkdir(parents=True, exist_ok=True)  # the job's working folder (Spark's scratch files)
    command = build_command(settings, application or repo_root() / "jobs" / "stream.py")
    if standby:
        command.append("--standby")
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            env=stream_env(settings), start_new_session=True, cwd=settings.home,
        )
    record = LaunchRecord(process.pid, psutil.Process(process.pid).create_time(), command, str(log_path),
                          datetime.now(UTC).isoformat(), socket.gethostname(), _launched_via())
    write_json_atomic(settings.run_paths.standby_launch if standby else settings.run_paths.launch, asdict(record))
    leases = [settings.standby_lease_path, settings.lease_path] if standby else [settings.lease_path]
    return _wait_for_lease(settings, process, log_path, lease_timeout, leases)


def _launched_via() -> str:
    """How this launch was asked for: over SSH (a stream host's session names both ends) or on this host."""
    connection = os.environ.get("SSH_CONNECTION")
    return f"ssh {connection}" if connection else "local"


def _wait_for_lease(settings: Settings, process: subprocess.Popen[bytes], log_path: Path,
                    timeout: float, leases: list[Path]) -> int:
    """The pid of the launched group's member that holds one of ``leases`` (a standby that finds the stream's
    lease free takes it at once: it is the stream then)."""
    deadline = time.monotonic() + timeout
    while True:
        code = process.poll()
        if code == EXIT_ALREADY_RUNNING:
            raise StreamAlreadyRunningError(read_holder(leases[0]))
        if code is not None:
            raise StreamLaunchFailedError(f"the stream exited with code {code} before taking the lease",
                                          log_path, code)
        for lease in leases:
            holder = _live_holder(lease)
            if holder is not None and holder.host == socket.gethostname() and holder.pgid == process.pid:
                return holder.pid
        if time.monotonic() > deadline:
            _kill_group(process)
            raise StreamLaunchFailedError(f"the stream did not take the lease within {timeout:.0f}s "
                                          "and was killed", log_path, None)
        time.sleep(0.2)


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
