"""The production rehearsal under the faults of a distributed deployment, healed with no person, exactly once at rest.

``streamwarden up --topology cluster`` runs PostgreSQL, Airflow's four components, a Spark standalone master and
two workers, an S3 server, the stream host (sshd, where the warden launches the driver) and the broker, each its
own process; the test's own producer writes the sites and keeps the session tables it meant. The first batch must
land on S3 within 3 minutes. Then, one after the other:

1. kill -9 of a Spark worker's process group (its executor with it): the stream goes on on the other worker;
2. kill -9 of the scheduler and everything it started (as a container's restart does): the stream keeps
   running meanwhile, ``up`` starts the scheduler again, and the warden adopts the stream (no new launch);
3. PostgreSQL stopped 60 s (held down, as an operator would), then started: Airflow recovers, the stream is
   untouched;
4. the S3 server frozen 60 s (SIGSTOP: every request hangs): the batch in flight finishes when it answers,
   or the stream is restarted; nothing lost, nothing doubled;
5. kill -9 of the triggerer: once it is back, the watch it runs acts again (a kill -9 of the stream then is
   seen and healed by the supervisor, which launches it again on the stream host over SSH);
6. a rolling restart of every Airflow component, as an upgrade does: no stream restart;
7. kill -9 of the stream host's SSH server: the driver it launched goes on, ``up`` starts the server again.

Each fault's detection and healing times are printed. At rest: ``maintain_tables`` compacts and proves the S3
tables, ``validate_output`` passes, every consumed offset is in ``session_rows`` or ``quarantine`` exactly once
(read through delta-rs from S3), every session's table is the producer's, and ``up`` stops leaving nothing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psutil
import pytest
import yaml

from fixtures import REPO
from fixtures.sessions import SCHEMA
from fixtures.stream_process import all_offsets, log_ends
from streamwarden.local.airflow_api import AirflowApi
from streamwarden.local.broker import port_in_use
from streamwarden.local.postgres import ServerUser, data_folder
from streamwarden.local.producer import ProducerOptions, ProducerReport, run_producer
from streamwarden.settings import Settings, load_settings
from streamwarden.tables.location import QUARANTINE, SESSION_ROWS
from streamwarden.tables.reading import read
from streamwarden.testing.replay import caught_up, final_tables
from streamwarden.warden.launcher import read_launch_record
from streamwarden.warden.status import read_status

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]
FIRST_BATCH_LIMIT = 180.0
HEAL_LIMIT = 300.0
OUTAGE = 60.0


@dataclass
class Fault:
    """One fault: when it was injected, when the platform saw it, when it was healed."""

    name: str
    injected: float = field(default_factory=time.monotonic)
    detected: float | None = None
    healed: float | None = None
    note: str = ""

    def line(self) -> str:
        def since(at: float | None) -> str:
            return "      -" if at is None else f"{at - self.injected:6.1f}s"
        return f"  {self.name:<36} detected {since(self.detected)}  healed {since(self.healed)}  {self.note}"


class Rehearsal:
    """``up --topology cluster`` as a child, read through its output, its processes, its API and its files."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.output: list[str] = []
        env = {k: v for k, v in os.environ.items() if not k.startswith(("STREAMWARDEN_", "AIRFLOW"))}
        env.update(STREAMWARDEN_HOME=str(home), PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '')}",
                   # the drill restarts the stream on purpose, twice within minutes
                   STREAMWARDEN_WARDEN_MAX_RESTARTS_PER_HOUR="10", STREAMWARDEN_WARDEN_BACKOFF_BASE="5")
        self.started = time.monotonic()
        self.up = subprocess.Popen([sys.executable, "-m", "streamwarden", "up", "--topology", "cluster", "--headless",
                                    "--standby", "off",  # the faults are healed by the warden's own restarts
                                    "--no-producer"], env=env, cwd=REPO, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=self._read, daemon=True).start()
        self.api: AirflowApi | None = None
        self.settings: Settings | None = None

    def _read(self) -> None:
        assert self.up.stdout is not None
        for line in self.up.stdout:
            self.output.append(line.rstrip())

    def said(self, pattern: str, after: int = 0) -> re.Match[str] | None:
        for line in self.output[after:]:
            if match := re.search(pattern, line):
                return match
        return None

    def wait_said(self, pattern: str, timeout: float, after: int = 0) -> re.Match[str]:
        found = wait_for(lambda: self.said(pattern, after), timeout, f"`up` to say {pattern!r}", self.tail)
        assert isinstance(found, re.Match)
        return found

    def tail(self) -> str:
        return "\n".join(self.output[-40:])

    def ready(self) -> None:
        """Once `up` printed its summary: the API signed in, the settings of the stream's tables."""
        broker = self.wait_said(r"broker \(Tansu.*\) on (\S+);", 120)[1]
        ui = self.wait_said(r"Airflow UI\s+(\S+)\s+\(user '(\w+)', password '([^']+)'\)", 600)
        self.api = AirflowApi(ui[1])
        self.api.login(ui[2], ui[3])
        config = yaml.safe_load((self.home / "cluster" / "streamwarden.yaml").read_text())
        self.settings = load_settings(home=self.home, bootstrap_servers=broker, output_root=config["output_root"],
                                      storage_options=config["storage_options"])

    # --- processes ---------------------------------------------------------------------------------------
    def part(self, *words: str) -> psutil.Process:
        """The child of `up` whose command line holds every word (a component `up` started, or started again)."""
        for child in psutil.Process(self.up.pid).children():
            try:
                command = " ".join(child.cmdline())
            except psutil.NoSuchProcess:
                continue
            if all(word in command for word in words):
                return child
        raise LookupError(f"no child of up runs {words}")

    def component(self, name: str) -> psutil.Process:
        for spelling in (name, name.replace("-", "_")):
            try:
                return self.part("airflow", spelling)
            except LookupError:
                continue
        raise LookupError(f"Airflow's {name} is not running")

    def stream_host_port(self) -> int:
        """The stream host's port, as ``up``'s summary gives it."""
        return int(self.wait_said(r"Stream host +127\.0\.0\.1:(\d+)", 10)[1])

    def stream_pid(self) -> int | None:
        assert self.settings is not None
        return read_status(self.settings).pid

    def last_batch(self) -> int:
        assert self.settings is not None
        return read_status(self.settings).last_batch_id or -1

    def health(self) -> dict[str, Any]:
        assert self.api is not None
        try:
            code, body = self.api.call("GET", "/api/v2/monitor/health")
        except OSError:
            return {}
        return body if code == 200 and isinstance(body, dict) else {}

    def healthy(self, *components: str) -> bool:
        health = self.health()
        return bool(health) and all(health.get(c, {}).get("status") == "healthy" for c in components)

    def beats_since(self, component: str, since: datetime) -> bool:
        """Airflow's ``component`` is healthy with a heartbeat later than ``since`` (a process started again)."""
        beat = self.health().get(component, {}).get(f"latest_{component}_heartbeat")
        return beat is not None and datetime.fromisoformat(beat) > since

    def alerts(self) -> int:
        assert self.settings is not None
        path = self.settings.run_paths.alerts
        return len(path.read_text().splitlines()) if path.exists() else 0

    def batch_after(self, batch: int) -> Callable[[], bool]:
        return lambda: self.last_batch() > batch

    def steady(self, timeout: float) -> int:
        """The stream's pid once one process has committed two batches in a row (no restart under way)."""
        def settled() -> int | None:
            pid, batch = self.stream_pid(), self.last_batch()
            if pid is None:
                return None
            wait_for(lambda: self.last_batch() >= batch + 2 or self.stream_pid() != pid, 120, "two batches",
                     self.tail)
            return pid if self.stream_pid() == pid and psutil.pid_exists(pid) else None
        found = wait_for(settled, timeout, "the stream steady", self.tail)
        assert isinstance(found, int)
        return found

    def run_dag(self, dag_id: str, timeout: float) -> str:
        assert self.api is not None
        run_id = self.api.trigger(dag_id, {})
        state = wait_for(lambda: _finished(self.api, dag_id, run_id), timeout, f"{dag_id} to finish", self.tail)
        return str(state)


def _finished(api: AirflowApi | None, dag_id: str, run_id: str) -> str | None:
    assert api is not None
    code, body = api.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{quote(run_id)}")
    state = body.get("state") if code == 200 else None
    return state if state in ("success", "failed") else None


def wait_for(check: Callable[[], Any], timeout: float, what: str, tail: Callable[[], str] = lambda: "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except (LookupError, psutil.Error, OSError):
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:.0f}s for {what}\n{tail()}")
        time.sleep(1.0)


def started_again(rehearsal: Rehearsal, name: str, before: int) -> bool:
    return rehearsal.component(name).pid != before


def kill_tree(process: psutil.Process, sig: signal.Signals = signal.SIGKILL) -> None:
    """``sig`` to a process and every descendant, as a container's runtime ends its processes."""
    members = [*process.children(recursive=True), process]
    for member in members:
        try:
            member.send_signal(sig)
        except psutil.NoSuchProcess:
            continue


@pytest.fixture()
def rehearsal(tmp_path: Path) -> Iterator[Rehearsal]:
    platform = Rehearsal(tmp_path / "home")
    try:
        yield platform
    finally:
        if platform.up.poll() is None:
            platform.up.send_signal(signal.SIGINT)
            try:
                platform.up.wait(240)
            except subprocess.TimeoutExpired:
                kill_tree(psutil.Process(platform.up.pid))
                platform.up.wait(30)
        # as root PostgreSQL's data is outside the home (/var/tmp): a test's home is never used again
        shutil.rmtree(data_folder(platform.home / "cluster" / "postgres" / "data", ServerUser.for_this_process()),
                      ignore_errors=True)


def test_the_rehearsal_heals_every_fault_of_a_distributed_deployment_exactly_once(rehearsal: Rehearsal) -> None:
    rehearsal.ready()
    settings = rehearsal.settings
    assert settings is not None
    stop_producing = threading.Event()
    reports: list[ProducerReport] = []
    options = ProducerOptions(sites=2, partitions=2, sessions_per_site=8, rows_per_snapshot=10,
                              updates_per_session=300, rate=150, track_expected=True, seed=11,
                              progress_interval=60)
    producer = threading.Thread(target=lambda: reports.append(run_producer(settings, options, stop=stop_producing)),
                                daemon=True)
    producer.start()
    first = rehearsal.wait_said(r"first batch committed to the Delta tables under (s3://\S+)", FIRST_BATCH_LIMIT + 120)
    first_batch_s = time.monotonic() - rehearsal.started
    print(f"\nfirst batch on {first[1]} {first_batch_s:.0f}s after `up` started; the faults, each healed with no "
          "person (times from the injection):")
    assert first_batch_s <= FIRST_BATCH_LIMIT

    # 1. a Spark worker and its executor
    stream = rehearsal.steady(HEAL_LIMIT)
    batch = rehearsal.last_batch()
    worker = rehearsal.part("deploy.worker.Worker", "worker-1")
    fault = Fault("kill -9 of a Spark worker")
    kill_tree(worker)
    fault.detected = wait_for(lambda: rehearsal.said(r"spark-worker-1 is not running") and time.monotonic(), 60,
                              "up to see the worker gone", rehearsal.tail)
    fault.healed = wait_for(lambda: rehearsal.batch_after(batch)() and time.monotonic(), HEAL_LIMIT,
                            "a batch after the worker's death", rehearsal.tail)
    assert rehearsal.stream_pid() == stream, "the stream restarted: it should go on on the other worker"
    print(fault.line())

    # 2. the scheduler and everything it started
    launch = (settings.run_paths.launch).read_text()
    batch = rehearsal.last_batch()
    mark = len(rehearsal.output)
    fault = Fault("kill -9 of the scheduler (its tree)")
    killed_at = datetime.now(UTC)
    kill_tree(rehearsal.component("scheduler"))
    fault.detected = wait_for(lambda: rehearsal.said("airflow-scheduler is not running", mark) and time.monotonic(),
                              60, "up to see the scheduler gone", rehearsal.tail)
    assert wait_for(rehearsal.batch_after(batch), HEAL_LIMIT, "a batch while the scheduler is down")
    fault.healed = wait_for(lambda: rehearsal.beats_since("scheduler", killed_at) and time.monotonic(), HEAL_LIMIT,
                            "the scheduler healthy again", rehearsal.tail)
    run = rehearsal.run_dag("stream_supervisor", HEAL_LIMIT)  # the restarted warden judges the running stream
    assert run == "success" and rehearsal.stream_pid() == stream
    assert settings.run_paths.launch.read_text() == launch, "the warden launched a second stream"
    fault.note = "stream kept running; the warden adopted it"
    print(fault.line())

    # 3. PostgreSQL down for a minute
    hold = rehearsal.home / "cluster" / "holds" / "postgres"
    batch = rehearsal.last_batch()
    fault = Fault("PostgreSQL stopped 60 s")
    hold.touch()
    rehearsal.part("postgres", "-D").send_signal(signal.SIGINT)
    fault.detected = wait_for(lambda: not rehearsal.healthy("metadatabase") and time.monotonic(), 60,
                              "Airflow to see its database gone", rehearsal.tail)
    time.sleep(max(0.0, OUTAGE - (time.monotonic() - fault.injected)))
    assert rehearsal.last_batch() > batch, "the stream stopped committing while Airflow's database was down"
    hold.unlink()
    fault.healed = wait_for(lambda: rehearsal.healthy("metadatabase", "scheduler", "triggerer", "dag_processor")
                            and time.monotonic(), HEAL_LIMIT, "Airflow healthy again", rehearsal.tail)
    assert rehearsal.stream_pid() == stream
    fault.note = "stream untouched"
    print(fault.line())

    # 4. the S3 server frozen for a minute
    store = rehearsal.part("moto.server")
    batch, alerts = rehearsal.last_batch(), rehearsal.alerts()
    fault = Fault("S3 server unavailable 60 s")
    store.suspend()
    while time.monotonic() - fault.injected < OUTAGE:  # seen: the warden alerts (a hung or failed stream)
        if fault.detected is None and (rehearsal.alerts() > alerts or rehearsal.stream_pid() != stream):
            fault.detected = time.monotonic()
        time.sleep(1.0)
    stalled = rehearsal.last_batch()
    store.resume()
    fault.healed = wait_for(lambda: rehearsal.last_batch() > max(batch, stalled) and time.monotonic(), HEAL_LIMIT,
                            "a batch committed after the store answers again", rehearsal.tail)
    restarted = rehearsal.stream_pid() != stream
    fault.note = ("the warden restarted the stream" if restarted else
                  "the batch in flight waited for the store and went on" +
                  ("" if fault.detected is not None else " (no alert within the outage)"))
    stream = rehearsal.steady(HEAL_LIMIT)
    print(fault.line())

    # 5. the triggerer, then a stream death its watch must see
    mark = len(rehearsal.output)
    fault = Fault("kill -9 of the triggerer")
    killed_at = datetime.now(UTC)
    kill_tree(rehearsal.component("triggerer"))
    fault.detected = wait_for(lambda: rehearsal.said("airflow-triggerer is not running", mark) and time.monotonic(),
                              60, "up to see the triggerer gone", rehearsal.tail)
    wait_for(lambda: rehearsal.beats_since("triggerer", killed_at), HEAL_LIMIT, "the triggerer healthy again",
             rehearsal.tail)
    os.killpg(os.getpgid(stream), signal.SIGKILL)
    new = wait_for(lambda: (pid := rehearsal.stream_pid()) not in (None, stream) and pid, HEAL_LIMIT,
                   "the watch to see the stream's death and the supervisor to start it again", rehearsal.tail)
    fault.healed = time.monotonic()
    record = read_launch_record(settings)
    assert record is not None and record.via.endswith(f" 127.0.0.1 {rehearsal.stream_host_port()}"), \
        f"the warden did not launch the stream on the stream host: {record}"
    fault.note = f"then kill -9 of the stream: restarted as pid {new} on the stream host ({record.via})"
    stream = new
    print(fault.line())

    # 6. a rolling restart of every Airflow component
    fault = Fault("rolling restart of Airflow")
    for name in ("api-server", "scheduler", "dag-processor", "triggerer"):
        before = rehearsal.component(name).pid
        os.kill(before, signal.SIGTERM)
        wait_for(partial(started_again, rehearsal, name, before), HEAL_LIMIT, f"the {name} started again",
                 rehearsal.tail)
        wait_for(lambda: rehearsal.healthy("metadatabase", "scheduler", "triggerer", "dag_processor"), HEAL_LIMIT,
                 "Airflow healthy again", rehearsal.tail)
    fault.healed = time.monotonic()
    assert rehearsal.stream_pid() == stream, "a rolling restart of Airflow restarted the stream"
    fault.note = "each component stopped and started again in turn; no stream restart"
    print(fault.line())

    # 7. the stream host's SSH server
    mark, batch = len(rehearsal.output), rehearsal.last_batch()
    fault = Fault("kill -9 of the stream host (sshd)")
    kill_tree(rehearsal.part("sshd", "stream-host/sshd_config"))
    fault.detected = wait_for(lambda: rehearsal.said("stream-host is not running", mark) and time.monotonic(), 60,
                              "up to see the stream host gone", rehearsal.tail)
    wait_for(rehearsal.batch_after(batch), HEAL_LIMIT, "a batch after the stream host's death", rehearsal.tail)
    fault.healed = wait_for(lambda: port_in_use("127.0.0.1", rehearsal.stream_host_port()) and time.monotonic(),
                            HEAL_LIMIT, "the stream host listening again", rehearsal.tail)
    assert rehearsal.stream_pid() == stream, "the stream host's death ended the stream"
    fault.note = "the driver it launched went on; up started the server again"
    print(fault.line())

    # at rest: every offset once, every session's table, maintenance and validation on S3
    stop_producing.set()
    producer.join(120)
    assert reports and reports[0].expected_tables is not None and not reports[0].delivery_errors
    expected = all_offsets(settings.bootstrap_servers, list(reports[0].topics))
    wait_for(lambda: caught_up(settings.checkpoint_location, log_ends(expected)), 600, "the stream to catch up",
             rehearsal.tail)
    assert rehearsal.run_dag("maintain_tables", 900) == "success"
    history = [json.loads(line) for line in settings.run_paths.maintenance.joinpath("history.jsonl")
               .read_text().splitlines()]
    assert history[-1]["outcome"] == "ok" and any("compacted, proven" in p["action"] for p in history[-1]["partitions"])
    assert rehearsal.run_dag("validate_output", 900) == "success"
    found = {}
    for name in (SESSION_ROWS, QUARANTINE):
        table = read(settings, name).to_table(columns=["topic", "partition", "offset"])
        found[name] = set(zip(*(table[c].to_pylist() for c in ("topic", "partition", "offset")), strict=True))
    assert not found[SESSION_ROWS] & found[QUARANTINE], "an offset landed in both tables"
    assert found[SESSION_ROWS] | found[QUARANTINE] == expected, "an offset was lost or invented"
    assert final_tables(read(settings, SESSION_ROWS).to_table(), SCHEMA) == reports[0].expected_tables
    listing = subprocess.run(  # as `up` tells a user to list them
        [sys.executable, "-m", "streamwarden", "tables"], capture_output=True, text=True, timeout=300, check=True,
        env={**os.environ, "STREAMWARDEN_HOME": str(rehearsal.home),
             "STREAMWARDEN_CONFIG_FILE": str(rehearsal.home / "cluster" / "streamwarden.yaml")})
    assert "s3://streamwarden/tables/session_rows" in listing.stdout and "session_rows: version" in listing.stdout

    platform = psutil.Process(rehearsal.up.pid).children(recursive=True)
    rehearsal.up.send_signal(signal.SIGINT)
    assert rehearsal.up.wait(240) == 0, rehearsal.tail()
    left = [p for p in platform if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not left, f"up left processes behind: {left}"
