"""``streamwarden up``: the whole local platform in the foreground, stopped cleanly by Ctrl-C.

It runs a Kafka-protocol broker (Tansu) on a free loopback port, the demo producer, and ``airflow
standalone`` with this repository's DAGs and plugins. It does not start the stream itself: the
``stream_supervisor`` DAG does (``up`` only triggers a first run instead of waiting for the schedule).

Each ``up`` starts a new platform, since its broker starts empty: it first kills what a crashed ``up``
on the same home left running (:mod:`.leftovers`), archives the previous run's state (:mod:`.archive`),
and keeps the Streamwarden DAGs paused until Airflow can run their tasks (:mod:`.clean_start`). The
Airflow home (database, admin password) stays.

On Ctrl-C or SIGTERM it stops, in order: the producer, Airflow (SIGINT, the only signal it stops
cleanly on), the stream (drain, then signals), the broker. ``up`` makes itself the child subreaper, so
the stream, started by an Airflow task that has since exited, is still its descendant, and a final
sweep leaves no process behind. Should ``up`` itself be killed, the kernel signals the producer (SIGTERM)
and Airflow (SIGINT) at once; the next ``up`` on the home kills whatever else is left.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
import webbrowser
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType

import psutil

from streamwarden.failures import EXIT_ALREADY_RUNNING, EXIT_CODES, EnvironmentFailure, FailureClass
from streamwarden.local.airflow_api import TAG, AirflowApi, AirflowApiError
from streamwarden.local.archive import KEEP, Archived, archive_previous_state
from streamwarden.local.broker import LOOPBACK, LocalBroker, free_port
from streamwarden.local.broker_memory import DEMO_RATE, MIB, BrokerMemory, Level, Reading, default_limit, parse_size
from streamwarden.local.clean_start import Parsing, end_previous_runs, parsed_since, pause_in_database
from streamwarden.local.cluster import ClusterParts
from streamwarden.local.forecast import supervisor_forecast
from streamwarden.local.leftovers import MARK, kill_leftovers
from streamwarden.local.platform_record import write_platform_record
from streamwarden.local.standby_choice import CHOICES, STANDBY_ENV, choose_standby
from streamwarden.logs.bounds import LogBounds
from streamwarden.logs.pruning import prune_logs
from streamwarden.logs.rolling import roll_if_full
from streamwarden.processes import become_child_subreaper, die_with_parent, group_members, reap_adopted
from streamwarden.settings import Settings
from streamwarden.settings_loading import CONFIG_FILE_ENV
from streamwarden.tables.location import RECORDS, SESSION_ROWS, TableLocation
from streamwarden.warden.launcher import REPO_ENV, log_tail, platform_env, repo_root, venv_bin
from streamwarden.warden.settings import load_warden_settings
from streamwarden.warden.status import read_status
from streamwarden.warden.stop import LIFECYCLE_POOL, StopFailedError, stop_stream

__all__ = ["AirflowApi", "LocalPlatform", "PlatformError", "PlatformOptions", "add_arguments", "run_platform"]

SUPERVISOR_DAG = "stream_supervisor"
TOPOLOGIES = ("embedded", "cluster")
AIRFLOW_BOOT_TIMEOUT = 300.0
DAG_PARSE_TIMEOUT = 180.0


class PlatformError(RuntimeError):
    """A component failed to start or died while the platform ran."""


@dataclass(frozen=True)
class PlatformOptions:
    headless: bool
    api_port: int
    producer_rate: float
    broker_memory_limit: int
    producer: bool = True  # False: no demo producer (the soak drives producers of its own)
    topology: str = "embedded"  # or "cluster": the production rehearsal (:mod:`.cluster`)
    standby: str = "auto"  # a warm standby: on, off, or on when it fits (:mod:`.standby_choice`)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``up`` command's options."""
    parser.add_argument("--headless", action="store_true",
                        help="no browser and no periodic status lines (tests, CI)")
    parser.add_argument("--api-port", type=int, default=0,
                        help="Airflow UI/API port on 127.0.0.1 (default: a free port)")
    parser.add_argument("--producer-rate", type=float, default=DEMO_RATE,
                        help="demo producer messages per second (default %(default)g: a day of it fits the "
                             "embedded broker's memory)")
    parser.add_argument("--broker-memory-limit", type=_size, default=None,
                        help="the embedded broker keeps every record: at this resident size (e.g. 2g) the demo "
                             "producer stops and the broker stays that big (default: a sixth of the machine's "
                             "memory, at most 4g)")
    parser.add_argument("--no-producer", action="store_false", dest="producer",
                        help="start no demo producer: your own producers write the site topics (the soak does)")
    parser.add_argument("--standby", choices=CHOICES, default="auto",
                        help="keep a warm standby (a second driver that takes over a killed stream in seconds): "
                             "auto (default) turns it on when 6 GiB of memory are available; "
                             "STREAMWARDEN_WARDEN_STANDBY, when set, decides")
    parser.add_argument("--topology", choices=TOPOLOGIES, default="embedded",
                        help="embedded (default): airflow standalone on SQLite, the stream in one local Spark JVM, "
                             "the tables in a local folder. cluster: the production rehearsal, every part its own "
                             "process: PostgreSQL, Airflow's api-server, scheduler, dag-processor and triggerer, a "
                             "Spark standalone master and two workers, an S3 server holding the tables "
                             "(docs/deployment.md)")


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def run_platform(settings: Settings, args: argparse.Namespace) -> int:
    """Run until Ctrl-C/SIGTERM (exit 0) or until a component dies (ENVIRONMENT exit code)."""
    options = PlatformOptions(args.headless, args.api_port, args.producer_rate,
                              args.broker_memory_limit or default_limit(), args.producer, args.topology,
                              args.standby)
    return LocalPlatform(settings, options, repo_root()).run()


class LocalPlatform:
    """The processes of ``streamwarden up`` and the order they start and stop in."""

    def __init__(self, settings: Settings, options: PlatformOptions, repo: Path) -> None:
        self.settings = settings
        self.options = options
        self.repo = repo
        self.log_bounds = LogBounds.of(settings)
        self.logs = self.log_bounds.folder
        self.cluster = (ClusterParts(settings, self.logs, self._spawn_part, signal.SIGTERM)
                        if options.topology == "cluster" else None)
        self.airflow_home = settings.home_paths.airflow if self.cluster is None else self.cluster.paths.airflow
        self.broker: LocalBroker | None = None
        self.producer: subprocess.Popen[bytes] | None = None
        self.broker_memory = BrokerMemory(options.broker_memory_limit)
        self.broker_level = Level.OK
        self.airflow: subprocess.Popen[bytes] | None = None
        self.api: AirflowApi | None = None
        self.archived: Archived | None = None
        self.started = time.monotonic()
        self.started_at = datetime.now(UTC)

    # --- lifecycle -------------------------------------------------------------------------------------
    def run(self) -> int:
        home = self.settings.home
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        home.chmod(0o700)  # the Airflow password, database, logs and alerts live below it
        with open(self.settings.home_paths.up_lock, "a+") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                print(f"streamwarden up: another `streamwarden up` runs with {home}", file=sys.stderr)
                return EXIT_ALREADY_RUNNING
            try:
                self._begin_new_platform()
            except PlatformError as exc:
                print(f"streamwarden up: {exc}", file=sys.stderr, flush=True)
                return EXIT_CODES[FailureClass.CONFIG]
            return self._run()

    def _begin_new_platform(self) -> None:
        """Before anything starts: stop what a crashed ``up`` left running on this home, archive the previous
        run's state, keep the Streamwarden DAGs paused until Airflow can run them, record this start."""
        killed = kill_leftovers(self.settings.home)
        if killed:
            self._say(f"killed {_count(len(killed), 'process', 'processes')} an earlier `up` on this home left "
                      f"running: {'; '.join(killed[:5])}{' ...' if len(killed) > 5 else ''}")
        self.archived = archive_previous_state(self.settings, self.started_at)
        if self.archived is not None:
            self._say(self.archived.describe())
        pause_in_database(self.airflow_home / "airflow.db")  # the cluster's are paused over its API first
        os.environ[MARK] = str(self.settings.home)  # every process started from here on inherits it
        if self.cluster is not None:
            if os.environ.get(CONFIG_FILE_ENV):
                raise PlatformError(f"--topology cluster writes the stream's secrets file itself; unset "
                                    f"{CONFIG_FILE_ENV} ({os.environ[CONFIG_FILE_ENV]})")
            os.environ[CONFIG_FILE_ENV] = str(self.cluster.prepare())
        self.logs.mkdir(parents=True, exist_ok=True)
        self.settings.home_paths.releases.mkdir(exist_ok=True)  # where upgrade_stream's releases are installed
        write_platform_record(self.settings, self.started_at)

    def _run(self) -> int:
        become_child_subreaper()
        # Even when started with SIGINT ignored (a background job of a script), Ctrl-C must stop `up`;
        # a handler (unlike SIG_IGN) is also reset to the default in every child.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        previous = signal.signal(signal.SIGTERM, _interrupt) or signal.SIG_DFL
        code = 0
        try:
            self._start()
            self._watch()
        except KeyboardInterrupt:
            self._say("stopping (Ctrl-C again is ignored; every step has a time limit) ...")
        except (PlatformError, AirflowApiError, EnvironmentFailure) as exc:
            print(f"streamwarden up: {exc}", file=sys.stderr, flush=True)
            code = EXIT_CODES[FailureClass.ENVIRONMENT]
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            try:
                self._stop()
            finally:
                signal.signal(signal.SIGINT, signal.default_int_handler)
                signal.signal(signal.SIGTERM, previous)
        return code

    def _start(self) -> None:
        prune_logs(self.log_bounds)
        self.broker = LocalBroker(log_path=self.logs / "broker.log", death_signal=signal.SIGTERM).start()
        self.settings = self.settings.model_copy(update={"bootstrap_servers": self.broker.bootstrap_servers})
        self._say(f"broker (Tansu, in memory: it keeps every record) on {self.broker.bootstrap_servers}; the "
                  f"demo producer stops when it holds {self.broker_memory.limit / MIB:.0f} MiB")
        standby, why = choose_standby(self.options.standby, os.environ, psutil.virtual_memory().available)
        os.environ[STANDBY_ENV] = "true" if standby else "false"  # the warden's setting, in every component
        self._say(f"warm standby {'on' if standby else 'off'} ({why})")
        env = self._base_env()
        if self.cluster is not None:
            self.settings = self.cluster.start_storage_and_compute(self.settings, env, self._say)
            env = self._base_env()
            env = {**env, **self.cluster.start_stream_host(env, self._say)}
        if self.options.producer:
            self.producer = _spawn(
                [sys.executable, "-m", "streamwarden", "produce", "--rate", f"{self.options.producer_rate:g}"],
                env, self.logs / "producer.log", cwd=self.settings.home, death_signal=signal.SIGTERM)
            self._say(f"demo producer at {self.options.producer_rate:g} msg/s (log {self.logs / 'producer.log'})")
        else:
            self._say("no demo producer (--no-producer): the site topics are written by producers of your own")

        port = self.options.api_port or free_port()
        base_url = f"http://{LOOPBACK}:{port}"
        self.airflow_home.mkdir(parents=True, exist_ok=True)
        self.api = api = AirflowApi(base_url)
        if self.cluster is None:
            # SIGINT when `up` dies without stopping it (kill -9): the only signal Airflow stops cleanly on.
            self.airflow = _spawn([str(venv_bin() / "airflow"), "standalone"], self._airflow_env(env, port),
                                  self.logs / "airflow.log", cwd=self.airflow_home, death_signal=signal.SIGINT)
            self._say(f"airflow standalone starting (log {self.logs / 'airflow.log'}) ...")
            self._wait("the Airflow API", api.healthy, AIRFLOW_BOOT_TIMEOUT)
            username, password = self._wait_for_login()
            api.login(username, password)
        else:
            self.cluster.start_api_server(self._airflow_env(env, port), port, self._say)
            self.airflow = self.cluster.airflow["api-server"]
            self._wait("the Airflow API server", api.healthy, AIRFLOW_BOOT_TIMEOUT)
            username, password = self._wait_for_login()
            api.login(username, password)
            paused = [dag["dag_id"] for dag in api.dags(tag=TAG) if not dag.get("is_paused")]
            for dag_id in paused:  # nothing runs them yet: the scheduler starts next
                api.set_paused(dag_id, True)
            self.cluster.start_other_components(self._say)
        self._wait("Airflow's execution API", api.execution_api_ready, AIRFLOW_BOOT_TIMEOUT)
        self._say(f"Airflow API ready after {self._elapsed():.0f}s")
        api.ensure_pool(LIFECYCLE_POOL, 1, "Streamwarden stream start/stop: one at a time")
        self._start_dags(api)
        cluster_lines = [] if self.cluster is None or self.cluster.spark is None else [
            f"  Spark master   {self.cluster.spark.url}  (executors on {self.cluster.spark.shape.workers} workers)",
            f"  PostgreSQL     127.0.0.1:{self.cluster.postgres.port}  (Airflow's database)",
            f"  Stream host    127.0.0.1:{self.cluster.stream_host.port}  (sshd: the warden launches the driver there)",
            f"  Secrets file   {self.cluster.paths.secrets}  (where the tables are, the bucket's credentials)",
        ]
        print("\n".join([
            "",
            f"  Airflow UI     {base_url}  (user {username!r}, password {password!r})",
            f"  Delta tables   {self.settings.output_location}  (list them: {self._tables_command()})",
            *cluster_lines,
            f"  Logs           {self.logs}",
            f"  Earlier runs   {self.settings.home_paths.archive}  (their state, the newest {KEEP} kept)",
            "  Stop           Ctrl-C (drains the stream, then stops everything)",
            "",
        ]), flush=True)
        if not self.options.headless and _has_display():
            webbrowser.open(base_url)

    def _start_dags(self, api: AirflowApi) -> None:
        """Once every DAG file is parsed again (their schedules then start with this platform): end the
        previous platform's unfinished runs and queued asset events, unpause the Streamwarden DAGs, trigger
        the supervisor."""
        parsing = Parsing(("?",), ())

        def parsed() -> bool:
            nonlocal parsing
            parsing = parsed_since(api, self.repo / "dags", self.started_at)
            return parsing.done

        self._wait("the DAG processor to parse every DAG file", parsed, DAG_PARSE_TIMEOUT,
                   on_timeout=lambda: f"not parsed yet: {', '.join(parsing.waiting)}")
        if parsing.import_errors:
            raise PlatformError("DAG files failed to import:\n" + "\n".join(parsing.import_errors))
        where = f"; its state is in {self.archived.folder}" if self.archived is not None else ""
        ended = end_previous_runs(api, self.started_at, f"interrupted: its platform stopped before it ended; "
                                  f"`streamwarden up` started a new platform at {self.started_at:%Y-%m-%d %H:%M:%S} "
                                  f"UTC{where}")
        if ended:
            self._say(f"marked {_count(len(ended), 'unfinished run')} of the previous platform failed: "
                      f"{', '.join(ended)}")
        dag_ids = sorted(dag["dag_id"] for dag in api.dags(tag=TAG))
        for dag_id in dag_ids:
            api.set_paused(dag_id, False)
        self._say(f"unpaused {', '.join(dag_ids)}")
        run_id = api.trigger(SUPERVISOR_DAG, {"reason": "streamwarden up"})
        self._say(f"triggered {SUPERVISOR_DAG} ({run_id}); it starts the stream")

    def _watch(self) -> None:
        """Until interrupted: fail when a component dies, report stream changes and the first output."""
        running_pid: int | None = None
        first_output = False
        last_line = time.monotonic()
        while True:
            time.sleep(1.0)
            for name, process in self._components():
                code = process.poll()
                if code is not None:
                    log = self.logs / f"{name}.log"
                    raise PlatformError(f"{name} exited with code {code}; last lines of {log}:\n"
                                        f"{log_tail(log)}")
            if self.cluster is not None:
                self.cluster.keep_up(self._say)
            reap_adopted(self._own_pids())
            self._roll_logs()
            memory = self._broker_reading()
            status = read_status(self.settings)
            if status.pid != running_pid:
                if status.pid is not None:
                    self._say(f"stream running as pid {status.pid}")
                else:
                    self._say(self._forecast())
                running_pid = status.pid
            if not first_output and _first_commit(self.settings):
                first_output = True
                self._say(f"first batch committed to the Delta tables under {self.settings.output_location}")
            if not self.options.headless and time.monotonic() - last_line >= 60:
                last_line = time.monotonic()
                self._say(f"stream {'running' if status.running else 'not running'}, last batch "
                          f"{status.last_batch_id}, heartbeat {status.heartbeat_age_s}s old; "
                          f"{memory.describe() if memory else 'broker memory unknown'}")

    def _broker_reading(self) -> Reading | None:
        """The broker's memory now; past 80% of its limit says so once, at the limit stops the demo producer."""
        process = self.broker.process if self.broker else None
        try:
            rss = psutil.Process(process.pid).memory_info().rss if process is not None else None
        except psutil.Error:
            rss = None
        if rss is None:
            return None
        reading = self.broker_memory.add(time.monotonic(), rss)
        if reading.level is self.broker_level or reading.level is Level.OK:
            return reading
        self.broker_level = reading.level
        if reading.level is Level.WARN:
            self._say(f"{reading.describe()}: the embedded broker keeps every record (Tansu in memory has no "
                      f"retention); at the limit the demo producer stops (--broker-memory-limit, --producer-rate)")
        elif self.producer is not None:
            _stop_process(self.producer, "producer", signal.SIGINT, grace=10)
            self.producer = None
            self._say(f"{reading.describe()}: limit reached, the demo producer is stopped so the broker stays at "
                      f"this size; the platform keeps running on what it holds. For more demo traffic start "
                      f"`streamwarden up` again (this run's state is archived) or give a lower --producer-rate")
        return reading

    def _forecast(self) -> str:
        """What the supervisor will do about the stream that stopped (paused: nothing)."""
        dag = self.api.dag(SUPERVISOR_DAG) if self.api is not None else None
        return supervisor_forecast(self.settings, load_warden_settings(), dag_id=SUPERVISOR_DAG,
                                   paused=bool(dag and dag.get("is_paused")))

    def _stop(self) -> None:
        if self.producer is not None:
            _stop_process(self.producer, "producer", signal.SIGINT, grace=10)
        if self.cluster is not None:
            self.cluster.stop_airflow(lambda process, name: _stop_process(process, name, signal.SIGTERM, grace=30))
        elif self.airflow is not None:
            _stop_process(self.airflow, "airflow", signal.SIGINT, grace=60)
            _stop_group(self.airflow.pid, grace=10)
        try:
            outcome = stop_stream(self.settings, drain_timeout=90, term_timeout=20)
            self._say(f"stream: {outcome.method.value} ({outcome.seconds:.1f}s)")
        except StopFailedError as exc:
            self._say(f"stream: {exc}")
        if self.cluster is not None:
            self.cluster.stop_rest()
        if self.broker is not None:
            self.broker.stop()
        leftovers = _live_descendants()
        if leftovers:
            self._say(f"terminating leftover processes: {[p.pid for p in leftovers]}")
            _terminate(leftovers, grace=10)
        reap_adopted(set())
        self._say("stopped")

    # --- helpers ---------------------------------------------------------------------------------------
    def _roll_logs(self) -> None:
        """Roll over each component's log that reached its size bound; then prune what is past the bounds."""
        names = [name for name, _ in self._components()] + (self.cluster.log_names() if self.cluster else [])
        rolled = [roll_if_full(self.logs / f"{name}.log", self.log_bounds) for name in set(names)]
        if any(rolled):
            prune_logs(self.log_bounds)

    def _components(self) -> list[tuple[str, subprocess.Popen[bytes]]]:
        """The processes whose death ends ``up`` (the cluster's others are started again)."""
        found = [("broker", self.broker.process if self.broker else None), ("producer", self.producer)]
        if self.cluster is None:
            found.append(("airflow", self.airflow))
        else:
            found.extend(self.cluster.processes())
        return [(name, process) for name, process in found if process is not None]

    def _own_pids(self) -> set[int]:
        """The children this process started itself (their ``Popen`` reaps them)."""
        own = {process.pid for _, process in self._components()}
        if self.cluster is not None:
            own |= self.cluster.pids()
        return own

    def _spawn_part(self, command: list[str], env: dict[str, str], log_path: Path,
                    cwd: Path) -> subprocess.Popen[bytes]:
        return _spawn(command, env, log_path, cwd, death_signal=signal.SIGTERM)

    def _base_env(self) -> dict[str, str]:
        """Every setting given to `up` (the stream's as resolved here), this venv first, where the checkout is."""
        return {**platform_env(self.settings), REPO_ENV: str(self.repo)}

    def _airflow_env(self, base: dict[str, str], port: int) -> dict[str, str]:
        spark_connection = {"conn_type": "spark", "host": self.settings.spark_master}
        return {
            **base,
            "AIRFLOW_HOME": str(self.airflow_home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.repo / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(self.repo / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",  # until its execution API answers
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__API__HOST": LOOPBACK,
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__BASE_URL": f"http://{LOOPBACK}:{port}",
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(spark_connection),
        }

    def _tables_command(self) -> str:
        """How to list the tables from another shell: the rehearsal's are reached through its secrets file."""
        if self.cluster is None:
            return "streamwarden tables"
        return f"STREAMWARDEN_CONFIG_FILE={self.cluster.paths.secrets} streamwarden tables"

    def _wait_for_login(self) -> tuple[str, str]:
        path = self.airflow_home / "simple_auth_manager_passwords.json.generated"
        self._wait(f"{path.name}", path.is_file, 60)
        users: dict[str, str] = json.loads(path.read_text())
        username = "admin" if "admin" in users else next(iter(users))
        return username, users[username]

    def _wait(self, what: str, ready: Callable[[], bool], timeout: float,
              on_timeout: Callable[[], str] | None = None) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if self.airflow is not None and self.airflow.poll() is not None:
                log = self.logs / ("airflow.log" if self.cluster is None else "airflow-api-server.log")
                raise PlatformError(f"{'airflow standalone' if self.cluster is None else 'the Airflow API server'} "
                                    f"exited with code {self.airflow.returncode} while waiting for {what}; last "
                                    f"lines of {log}:\n{log_tail(log)}")
            if time.monotonic() > deadline:
                detail = on_timeout() if on_timeout else ""
                suffix = f":\n{detail}" if detail else ""
                raise PlatformError(f"{what} not ready after {timeout:.0f}s{suffix}")
            time.sleep(1.0)

    def _elapsed(self) -> float:
        return time.monotonic() - self.started

    def _say(self, message: str) -> None:
        print(f"[up {self._elapsed():6.1f}s] {message}", flush=True)


def _spawn(command: list[str], env: dict[str, str], log_path: Path, cwd: Path,
           death_signal: signal.Signals) -> subprocess.Popen[bytes]:
    """A child in its own session (terminal Ctrl-C reaches only ``up``, which stops children in order) that
    gets ``death_signal`` when ``up`` dies without stopping it."""
    cwd.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        # `up` runs no other thread, which is what makes a preexec_fn safe.
        return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                env=env, cwd=cwd, start_new_session=True,
                                preexec_fn=die_with_parent(death_signal))  # noqa: PLW1509




def _stop_process(process: subprocess.Popen[bytes], name: str, first: signal.Signals, grace: float) -> None:
    """``first`` signal, then SIGTERM, then SIGKILL, each given ``grace`` seconds."""
    for sig in (first, signal.SIGTERM, signal.SIGKILL):
        if process.poll() is not None:
            return
        if sig != first:
            print(f"[up] {name} still running; sending {sig.name}", flush=True)
        process.send_signal(sig)
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            continue


def _stop_group(pgid: int, grace: float) -> None:
    """Terminate what is left of a process group (Airflow's components after ``standalone`` exited)."""
    _terminate(group_members(pgid), grace)


def _terminate(processes: list[psutil.Process], grace: float) -> None:
    for process in processes:
        try:
            process.terminate()
        except psutil.NoSuchProcess:
            continue
    _, alive = psutil.wait_procs(processes, timeout=grace)
    for process in alive:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            continue
    psutil.wait_procs(alive, timeout=grace)


def _live_descendants() -> list[psutil.Process]:
    found = []
    for process in psutil.Process().children(recursive=True):
        try:
            if process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except psutil.NoSuchProcess:
            continue
    return found


def _first_commit(settings: Settings) -> bool:
    """The stream has committed a batch with rows to ``session_rows`` (or ``records``)."""
    location = TableLocation.of(settings, RECORDS if settings.pipeline == "records" else SESSION_ROWS)
    table = location.open_or_none()
    return table is not None and bool(table.file_uris())


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"


def _has_display() -> bool:
    return sys.platform == "darwin" or bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt
