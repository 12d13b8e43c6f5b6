"""The parts of the production rehearsal that ``streamwarden up --topology cluster`` runs beside the broker.

``up`` runs the embedded platform by default (``airflow standalone`` on SQLite, the stream in one local Spark
JVM, the tables in a local folder). ``--topology cluster`` runs the production topology instead, every part a
real process on loopback with its own folder under ``<home>/cluster``:

- PostgreSQL as Airflow's metadata database (:mod:`.postgres`);
- Airflow's api-server, scheduler (LocalExecutor), dag-processor and triggerer (:mod:`.airflow_components`);
- a Spark standalone master and two workers (:mod:`.spark_cluster`): the stream is submitted to the master
  through the Spark connection, its executors run on the workers;
- an S3 API server holding the output tables (:mod:`.object_store`), whose credentials reach the stream only
  through the secrets file ``STREAMWARDEN_CONFIG_FILE`` names (``<home>/cluster/streamwarden.yaml``, mode 0600);
- the stream host (:mod:`.stream_host`): an SSH server where the warden launches and halts the stream, so the
  driver is no Airflow component's child.

A part that dies is started again, as a service manager or a container's restart policy would, unless an
operator holds it: a file ``<home>/cluster/holds/<part>`` (:data:`RESTARTABLE` names the parts) keeps it down
until removed. The S3 server is not restarted (it keeps the objects in memory, as the broker keeps the
records): its death ends ``up``.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from streamwarden.failures import EnvironmentFailure
from streamwarden.local.airflow_components import COMPONENTS, component_command, component_env, migrate
from streamwarden.local.object_store import BUCKET, REGION, LocalObjectStore
from streamwarden.local.postgres import LocalPostgres
from streamwarden.local.spark_cluster import ClusterShape, LocalSparkCluster
from streamwarden.local.stream_host import LocalStreamHost
from streamwarden.settings import Settings

Say = Callable[[str], None]
Spawn = Callable[[list[str], dict[str, str], Path, Path], subprocess.Popen[bytes]]
"""Starts a command with an environment, a log and a working folder (``up``'s ``_spawn``)."""
STREAM_SETTINGS = {"shuffle_partitions": 2, "max_read_tasks": 2}
"""One wave of tasks on the rehearsal's two one-core executors."""
OUTPUT_ROOT = f"s3://{BUCKET}/tables"
EXECUTORS = {"spark.executor.cores": "1", "spark.executor.memory": "1g", "spark.cores.max": "2"}


@dataclass(frozen=True)
class ClusterPaths:
    """The rehearsal's folders and files under ``<home>/cluster``."""

    root: Path

    @property
    def postgres(self) -> Path:
        return self.root / "postgres"

    @property
    def spark(self) -> Path:
        return self.root / "spark"

    @property
    def airflow(self) -> Path:
        """The components' Airflow home (their config, task logs, the admin password)."""
        return self.root / "airflow"

    @property
    def secrets(self) -> Path:
        """The stream's secrets file (``STREAMWARDEN_CONFIG_FILE``): where the tables are, the bucket's
        credentials."""
        return self.root / "streamwarden.yaml"

    @property
    def airflow_secrets(self) -> Path:
        return self.root / "airflow-secrets.json"

    @property
    def s3_credentials(self) -> Path:
        return self.root / "s3-credentials.json"

    @property
    def stream_host(self) -> Path:
        return self.root / "stream-host"

    @property
    def holds(self) -> Path:
        return self.root / "holds"


RESTART_BACKOFF = (1.0, 60.0)
"""The first and the longest wait before a part that died is started again: doubled at each death of a part that
ran less than the longest wait (Airflow's components exit while their database is down), reset after one that
ran longer."""


@dataclass
class Restartable:
    """A part ``up`` starts again when it dies: how to start it, whether it runs, when it was (re)started."""

    name: str
    start: Callable[[], object]
    alive: Callable[[], bool]
    restarts: list[float] = field(default_factory=list)
    started_at: float = field(default_factory=time.monotonic)
    died_at: float | None = None
    wait: float = RESTART_BACKOFF[0]

    def due(self, now: float) -> bool:
        """Dead, and waited long enough: the wait doubles after a short run and is reset after a long one."""
        if self.died_at is None:
            self.died_at = now
            ran = now - self.started_at
            first, longest = RESTART_BACKOFF
            self.wait = first if ran > longest else min(longest, self.wait * 2 if self.restarts else first)
        return now - self.died_at >= self.wait

    def restarted(self, now: float) -> None:
        self.restarts.append(time.time())
        self.started_at, self.died_at = now, None


class ClusterParts:
    """PostgreSQL, the Spark cluster, the S3 server and Airflow's components, started and kept up in order."""

    def __init__(self, settings: Settings, logs: Path, spawn: Spawn, death_signal: signal.Signals) -> None:
        self.paths = ClusterPaths(settings.home / "cluster")
        self.logs = logs
        self.spawn = spawn
        self.death_signal = death_signal
        self.postgres = LocalPostgres(self.paths.postgres, logs / "postgres.log", death_signal)
        self.spark: LocalSparkCluster | None = None
        self.store = LocalObjectStore(logs / "s3.log", death_signal)
        self.stream_host = LocalStreamHost(self.paths.stream_host, logs / "stream-host.log", spawn)
        self.airflow: dict[str, subprocess.Popen[bytes]] = {}
        self.airflow_env: dict[str, str] = {}
        self.api_port = 0
        self.restartable: list[Restartable] = []

    # --- before Airflow --------------------------------------------------------------------------------
    def prepare(self) -> Path:
        """The folders, and the stream's secrets file (the S3 server's port is chosen already): its path."""
        self.paths.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.paths.holds.mkdir(exist_ok=True)
        path = self.paths.secrets
        path.touch(mode=0o600)
        path.chmod(0o600)
        path.write_text(yaml.safe_dump({"output_root": OUTPUT_ROOT, "storage_options": self._storage_options()},
                                       sort_keys=True))
        return path

    def start_storage_and_compute(self, settings: Settings, env: dict[str, str], say: Say) -> Settings:
        """PostgreSQL, the S3 server with its bucket, the Spark cluster; ``settings`` pointed at them."""
        self.postgres.start()
        say(f"PostgreSQL on 127.0.0.1:{self.postgres.port} (Airflow's database; data in {self.postgres.data})")
        options = self._storage_options()
        self.store.start(options)
        say(f"S3 server (moto) on {self.store.endpoint}, bucket {BUCKET!r}: the output tables")
        self.spark = LocalSparkCluster(self.paths.spark, ClusterShape(), env, self.death_signal).start()
        shape = self.spark.shape
        say(f"Spark master {self.spark.url} with {shape.workers} workers of {shape.worker_cores} core and "
            f"{shape.worker_memory} each (logs {self.paths.spark})")
        spark_conf = {**EXECUTORS, **settings.spark_conf}
        # validated again (not model_copy): the derived locations are cached on the object
        return Settings.model_validate({**settings.model_dump(), "spark_master": self.spark.url,
                                        "output_root": OUTPUT_ROOT, "storage_options": options,
                                        "spark_conf": spark_conf, **STREAM_SETTINGS})

    def start_stream_host(self, env: dict[str, str], say: Say) -> dict[str, str]:
        """The stream host with the platform's settings ``env``; what Airflow's components need to reach it."""
        self.stream_host.start(env)
        say(f"stream host (sshd) on 127.0.0.1:{self.stream_host.port}: the warden launches the stream there over "
            f"SSH (log {self.stream_host.log_path})")
        return self.stream_host.airflow_env()

    def _storage_options(self) -> dict[str, str]:
        """The bucket's options (delta-rs's names); the key pair is made once per home."""
        path = self.paths.s3_credentials
        if not path.is_file():
            import secrets

            path.touch(mode=0o600)
            path.write_text(json.dumps({"AWS_ACCESS_KEY_ID": f"rehearsal-{secrets.token_hex(6)}",
                                        "AWS_SECRET_ACCESS_KEY": secrets.token_urlsafe(30)}))
        keys: dict[str, str] = json.loads(path.read_text())
        return {**keys, "AWS_ENDPOINT_URL": self.store.endpoint, "AWS_REGION": REGION, "AWS_ALLOW_HTTP": "true"}

    # --- Airflow ---------------------------------------------------------------------------------------
    def start_api_server(self, base_env: dict[str, str], api_port: int, say: Say) -> None:
        """``airflow db migrate``, then the API server alone (the DAGs are paused through it before anything
        that runs them starts)."""
        self.api_port = api_port
        self.paths.airflow.mkdir(parents=True, exist_ok=True)
        self.airflow_env = component_env({**base_env, "AIRFLOW_HOME": str(self.paths.airflow)}, self.postgres.url,
                                         f"http://127.0.0.1:{api_port}", self.paths.airflow_secrets)
        started = time.monotonic()
        migrate(self.airflow_env, self.paths.airflow, self.logs / "airflow-migrate.log")
        say(f"airflow db migrate on PostgreSQL done in {time.monotonic() - started:.0f}s")
        self._start_component("api-server")

    def start_other_components(self, say: Say) -> None:
        for name in COMPONENTS[1:]:
            self._start_component(name)
        say(f"Airflow components running: {', '.join(COMPONENTS)} (logs {self.logs}/airflow-<component>.log)")
        self._register_restartable()

    def _start_component(self, name: str) -> None:
        self.airflow[name] = self.spawn(component_command(name, self.api_port), self.airflow_env,
                                        self.logs / f"airflow-{name}.log", self.paths.airflow)

    def _register_restartable(self) -> None:
        def airflow_part(name: str) -> Restartable:
            return Restartable(f"airflow-{name}", lambda: self._start_component(name),
                               lambda: self.airflow[name].poll() is None)

        assert self.spark is not None
        spark = self.spark
        self.restartable = [
            Restartable("postgres", self.postgres.start,
                        lambda: self.postgres.process is not None and self.postgres.process.poll() is None),
            *(Restartable(f"spark-{daemon.name}", daemon.start,
                          lambda d=daemon: d.process is not None and d.process.poll() is None)  # type: ignore[misc]
              for daemon in spark.daemons),
            *(airflow_part(name) for name in COMPONENTS),
            Restartable("stream-host", self.stream_host.start, self.stream_host.alive),
        ]

    # --- while it runs ---------------------------------------------------------------------------------
    def keep_up(self, say: Say) -> None:
        """Start every part that died again, after its backoff, unless it is held."""
        for part in self.restartable:
            if part.alive() or (self.paths.holds / part.name).exists() or not part.due(time.monotonic()):
                continue
            say(f"{part.name} is not running; starting it again (restart {len(part.restarts) + 1}, after "
                f"{part.wait:.0f}s)")
            try:
                part.start()
            except EnvironmentFailure as exc:
                say(f"{part.name} did not start: {exc.message}; trying again")
            part.restarted(time.monotonic())

    def processes(self) -> list[tuple[str, subprocess.Popen[bytes]]]:
        """The parts whose death ends ``up`` (the S3 server); the others are restarted."""
        return [("s3", self.store.process)] if self.store.process is not None else []

    def pids(self) -> set[int]:
        """Every part's process this ``up`` started (their ``Popen`` reaps them)."""
        processes = [self.postgres.process, self.store.process, self.stream_host.process, *self.airflow.values(),
                     *(daemon.process for daemon in (self.spark.daemons if self.spark else []))]
        return {process.pid for process in processes if process is not None}

    def log_names(self) -> list[str]:
        return ["postgres", "s3", "stream-host", *(f"airflow-{name}" for name in COMPONENTS)]

    # --- stop ------------------------------------------------------------------------------------------
    def stop_airflow(self, stop: Callable[[subprocess.Popen[bytes], str], None]) -> None:
        """The components in reverse order (the API server last: the others report to it)."""
        for name in reversed(COMPONENTS):
            if name in self.airflow:
                stop(self.airflow[name], f"airflow-{name}")

    def stop_rest(self) -> None:
        if self.stream_host.process is not None:
            self.stream_host.process.terminate()
            self.stream_host.process.wait(timeout=10)
        if self.spark is not None:
            self.spark.stop()
        self.store.stop()
        self.postgres.stop()
