"""A Spark standalone cluster for the production rehearsal: a master and its workers, each a process on loopback.

The master and every worker are the JVMs a Spark standalone deployment runs (``spark-class`` of this
environment's PySpark, as ``start-master.sh`` and ``start-worker.sh`` run them), each with its own folder
(``work/``: the executors' folders and logs) and log. A worker offers bounded cores and memory; the stream,
submitted to the master, gets its executors on the workers. Python workers of the executors run this
environment's interpreter, so they import Streamwarden as the driver does.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from streamwarden.failures import EnvironmentFailure
from streamwarden.local.broker import LOOPBACK, free_port, port_in_use
from streamwarden.processes import die_with_parent
from streamwarden.warden.launcher import venv_bin

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
DAEMON_MEMORY = "256m"
"""The heap of the master and of each worker daemon (Spark's default is 1g; they only schedule)."""


def spark_home() -> Path:
    """This environment's Spark: the ``pyspark`` package holds its jars and scripts (found, not imported: the
    platform's side runs without Spark in its processes)."""
    found = importlib.util.find_spec("pyspark")
    if found is None or found.origin is None:
        raise EnvironmentFailure("PySpark is not installed in this environment (make install)")
    return Path(found.origin).parent


@dataclass(frozen=True)
class ClusterShape:
    """How many workers, and what each offers to executors."""

    workers: int = 2
    worker_cores: int = 1
    worker_memory: str = "1500m"


class SparkProcess:
    """One daemon of the cluster (the master or a worker): its command, folder, log and process."""

    def __init__(self, name: str, command: list[str], folder: Path, env: Mapping[str, str],
                 death_signal: signal.Signals | None) -> None:
        self.name = name
        self.command = command
        self.folder = folder
        self.env = dict(env)
        self.death_signal = death_signal
        self.process: subprocess.Popen[bytes] | None = None
        self.log_offset = 0  # where this start's lines begin in its log (which keeps every start's)

    @property
    def log_path(self) -> Path:
        return self.folder / f"{self.name}.log"

    def start(self) -> SparkProcess:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                cwd=self.folder, start_new_session=True,
                preexec_fn=die_with_parent(self.death_signal) if self.death_signal else None)  # noqa: PLW1509
        return self

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM to the daemon's process group (a worker's executors with it), then SIGKILL."""
        if self.process is None or self.process.poll() is not None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.process.wait(timeout)
                break
            except subprocess.TimeoutExpired:
                continue


class LocalSparkCluster:
    """A standalone master and ``shape.workers`` workers under ``folder``, all on 127.0.0.1."""

    def __init__(self, folder: Path, shape: ClusterShape, env: Mapping[str, str],
                 death_signal: signal.Signals | None = None) -> None:
        self.folder = folder
        self.shape = shape
        self.death_signal = death_signal
        self.port = free_port()
        self.env = {**env, "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": LOOPBACK,
                    "SPARK_DAEMON_MEMORY": DAEMON_MEMORY, "SPARK_LOG_DIR": str(folder), "SPARK_NO_DAEMONIZE": "1"}
        self.master = SparkProcess("master", self._master_command(), folder / "master", self.env, death_signal)
        self.workers = [SparkProcess(f"worker-{n}", self._worker_command(n), folder / f"worker-{n}", self.env,
                                     death_signal) for n in range(1, shape.workers + 1)]

    @property
    def url(self) -> str:
        """The master's URL: ``STREAMWARDEN_SPARK_MASTER`` and the Spark connection's host."""
        return f"spark://{LOOPBACK}:{self.port}"

    @property
    def daemons(self) -> list[SparkProcess]:
        return [self.master, *self.workers]

    def start(self, timeout: float = 90.0) -> LocalSparkCluster:
        """The master, then every worker, once each has registered with it; ENVIRONMENT when one does not."""
        self.master.start()
        self._wait(lambda: port_in_use(LOOPBACK, self.port), "the Spark master to listen", self.master, timeout)
        for worker in self.workers:
            worker.start()
        for worker in self.workers:
            self._wait(partial(_registered, worker), f"{worker.name} to register with the master", worker, timeout)
        return self

    def restart(self, daemon: SparkProcess) -> None:
        """Start a daemon that died again (a worker registers with the running master by itself)."""
        daemon.start()

    def stop(self) -> None:
        for daemon in reversed(self.daemons):
            daemon.stop()

    def _master_command(self) -> list[str]:
        return [str(venv_bin() / "spark-class"), MASTER_CLASS, "--host", LOOPBACK, "--port", str(self.port),
                "--webui-port", str(free_port())]

    def _worker_command(self, number: int) -> list[str]:
        work = self.folder / f"worker-{number}" / "work"
        return [str(venv_bin() / "spark-class"), WORKER_CLASS, "--host", LOOPBACK, "--webui-port", str(free_port()),
                "--cores", str(self.shape.worker_cores), "--memory", self.shape.worker_memory,
                "--work-dir", str(work), self.url]

    @staticmethod
    def _wait(ready: Callable[[], bool], what: str, daemon: SparkProcess, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if daemon.process is not None and daemon.process.poll() is not None:
                raise EnvironmentFailure(f"the Spark {daemon.name} exited with code {daemon.process.returncode} "
                                         f"while waiting for {what}; see {daemon.log_path}")
            if time.monotonic() > deadline:
                raise EnvironmentFailure(f"waited {timeout:.0f}s for {what}; see {daemon.log_path}")
            time.sleep(0.2)


def _registered(worker: SparkProcess) -> bool:
    """The worker's log says, since its last start, that it registered with the master."""
    try:
        with open(worker.log_path, "rb") as log:
            log.seek(worker.log_offset)
            return b"Successfully registered with master" in log.read()
    except FileNotFoundError:
        return False
