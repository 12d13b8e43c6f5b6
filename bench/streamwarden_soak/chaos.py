"""The soak's side of the run: traffic started once the broker is up, the plan carried out on time, and before
the stop the platform settled: faults over, producers stopped, the stream caught up, a last ``validate_output``.

Everything it does goes to ``soak.jsonl`` beside the long run's ``samples.jsonl``, a JSON object a line:
``plan`` (once), ``fault`` (each injection's record), ``workload`` (bursts, restart requests), ``settle``
(the end offsets, the catch-up, the final validation), ``producer`` (each producer's report file).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from streamwarden_longrun.dag_runs import DagRunWatch
from streamwarden_longrun.runner import LongRun

from streamwarden.kafka.admin import list_partitions, metadata_consumer, watermarks_within
from streamwarden.local.broker import LOOPBACK
from streamwarden.processes import become_child_subreaper, reap_adopted
from streamwarden.settings import Settings
from streamwarden.testing.replay import caught_up

from .faults import Injector
from .gauges import Gauges, quiet
from .plan import Planned, WorkloadKind
from .targets import Platform, TargetMissingError
from .traffic import TrafficShape, producer_command, start_producer, stop_producer

FINAL_VALIDATION_TIMEOUT_S = 900.0
VALIDATION_DAG = "validate_output"
RESTART_DAG = "restart_sessions"


@dataclass(frozen=True)
class SoakPlan:
    faults: list[Planned]
    workload: list[Planned]
    shape: TrafficShape
    settle_timeout_s: float


class SoakLog:
    """``soak.jsonl``: appended and flushed a line at a time, from several threads."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def write(self, record_type: str, document: dict[str, Any]) -> None:
        line = json.dumps({"type": record_type, **document}, default=str)
        with self._lock, open(self.path, "a") as out:
            out.write(line + "\n")


class Chaos:
    """The :class:`~streamwarden_longrun.runner.RunHooks` of the soak."""

    def __init__(self, plan: SoakPlan, results: Path, say: Callable[[str], None]) -> None:
        self.plan = plan
        self.results = results
        self.say = say
        self.log = SoakLog(results / "soak.jsonl")
        self.platform: Platform | None = None
        self.injector: Injector | None = None
        self.run: LongRun | None = None
        self.settings: Settings | None = None
        self.producer: subprocess.Popen[bytes] | None = None
        self.bursts: list[subprocess.Popen[bytes]] = []
        self.threads: list[threading.Thread] = []
        self._due = sorted([*plan.faults, *plan.workload], key=lambda p: p.at_s)
        self._producer_env: dict[str, str] | None = None
        self._next_producer_try = 0.0
        self.gauges: Gauges | None = None
        self.up: subprocess.Popen[bytes] | None = None

    # --- RunHooks --------------------------------------------------------------------------------------
    def started(self, run: LongRun, up: subprocess.Popen[bytes]) -> None:
        self.run = run
        self.settings = run.settings
        # a component the soak starts again is its child, not `up`'s: what it starts and leaves (the stream, once
        # the launching task exits) comes back here instead of to init, where no census would see it
        become_child_subreaper()
        self.up = up
        watch = DagRunWatch(f"http://{LOOPBACK}:{run.options.api_port}", run.settings.home_paths.airflow)
        self.platform = Platform(up.pid, run.settings, watch, self.results, self.platform_roots)
        self.injector = Injector(self.platform, self.elapsed, self.say)
        self.log.write("plan", {"faults": [p.to_json() for p in self.plan.faults],
                                "workload": [p.to_json() for p in self.plan.workload],
                                "shape": {"rate": self.plan.shape.rate, "seed": self.plan.shape.seed,
                                          "sites": self.plan.shape.sites}})

    def platform_roots(self) -> list[int]:
        """The soak's children that are the platform's: every one but `up` (whose tree the census walks anyway) and
        the producers, the restarted Airflow components and the orphans adopted from their trees among them."""
        traffic = {process.pid for process in [self.producer, *self.bursts] if process is not None}
        if self.up is not None:
            traffic.add(self.up.pid)
        with contextlib.suppress(psutil.Error):
            return [child.pid for child in psutil.Process().children() if child.pid not in traffic]
        return []

    def elapsed(self) -> float:
        assert self.run is not None
        return round(time.monotonic() - self.run.started, 1)

    def look(self, elapsed_s: float) -> None:
        if self.producer is None:
            self._start_traffic(elapsed_s)
            return
        while self._due and self._due[0].at_s <= elapsed_s:
            planned = self._due.pop(0)
            thread = threading.Thread(target=self._carry_out, args=(planned,), name=f"soak-{planned.kind}",
                                      daemon=True)
            thread.start()
            self.threads.append(thread)
        self.bursts = [burst for burst in self.bursts if burst.poll() is None]
        restarted = self.platform.restarted if self.platform is not None else []
        started = [p for p in [self.up, self.producer, *self.bursts, *restarted] if p is not None]
        reap_adopted({process.pid for process in started})

    def before_stop(self, reason: str, look: Callable[[], None], say: Callable[[str], None]) -> None:
        """At the deadline: the faults end, the producers stop, the stream catches up, a last validation. Cut short
        (Ctrl-C, SIGTERM, `up` gone): the faults end and the producers stop, nothing is waited for."""
        say(f"settling: {sum(t.is_alive() for t in self.threads)} fault(s) still acting, then the producers stop")
        if self.injector is not None:
            self.injector.stopping.set()
        for thread in self.threads:
            while thread.is_alive():
                look()
                thread.join(2)
        for burst in self.bursts:
            stop_producer(burst)
        if self.producer is not None:
            stop_producer(self.producer)
        ends = self._end_offsets(say)
        full = reason == "deadline"
        caught = self._catch_up(ends, look, say) if ends and full else None
        validation = self._final_validation(look, say) if full else {"state": None, "error": f"not run: {reason}"}
        if self.gauges is not None:
            self.gauges.stop()
        self.log.write("settle", {"at_s": self.elapsed(), "end_offsets": ends, "caught_up_s": caught,
                                  "final_validation": validation})
        if self.platform is not None:
            self.platform.stop_restarted()

    # --- traffic ----------------------------------------------------------------------------------------
    def _start_traffic(self, elapsed_s: float) -> None:
        """The steady producer, once the broker's address is known (from Airflow's environment under `up`)."""
        if self.platform is None or elapsed_s < self._next_producer_try:
            return
        self._next_producer_try = elapsed_s + 2
        env = self._platform_env()
        if env is None:
            return
        self._producer_env = env
        self.platform.settings = self._broker_settings()  # the malformed bursts go to `up`'s broker too
        self.gauges = Gauges(self.platform, self.platform.settings, lambda doc: self.log.write("gauge", doc),
                             self.elapsed)
        self.gauges.start()
        shape = self.plan.shape
        self.producer = start_producer(
            producer_command(self.results / "producer-steady.json", shape, shape.seed, shape.rate, gaps=True),
            env, self.results / "producer-steady.log")
        self.log.write("workload", {"kind": "steady_producer", "at_s": self.elapsed(), "pid": self.producer.pid,
                                    "rate": shape.rate, "report": "producer-steady.json"})
        self.say(f"steady producer at {shape.rate:g} msg/s on {shape.sites} sites (pid {self.producer.pid})")

    def _platform_env(self) -> dict[str, str] | None:
        assert self.platform is not None
        with contextlib.suppress(TargetMissingError, psutil.Error):
            environ = self.platform.one("airflow-standalone").environ()
            if "STREAMWARDEN_BOOTSTRAP_SERVERS" in environ:
                return {name: value for name, value in environ.items() if not name.startswith("AIRFLOW")}
        return None

    def _broker_settings(self) -> Settings:
        """The run's settings with the broker `up` started (its port is chosen at start)."""
        assert self.settings is not None and self._producer_env is not None
        return self.settings.model_copy(
            update={"bootstrap_servers": self._producer_env["STREAMWARDEN_BOOTSTRAP_SERVERS"]})

    def _burst(self, planned: Planned) -> None:
        assert self._producer_env is not None
        shape = self.plan.shape
        rate = shape.rate * float(planned.params["factor"])
        name = f"producer-burst-{planned.index}"
        command = producer_command(self.results / f"{name}.json", shape, shape.seed * 1000 + planned.index + 1, rate,
                                   duration=float(planned.params["seconds"]), gaps=False)
        burst = start_producer(command, self._producer_env, self.results / f"{name}.log")
        self.bursts.append(burst)
        self.log.write("workload", {"kind": "burst", "index": planned.index, "at_s": self.elapsed(), "rate": rate,
                                    "seconds": planned.params["seconds"], "report": f"{name}.json"})

    def _restart_sessions(self, planned: Planned) -> None:
        assert self.platform is not None
        try:
            run_id = self.platform.trigger(RESTART_DAG, {}, f"soak workload {planned.index}")
        except TargetMissingError as exc:
            self.log.write("workload", {"kind": "restart_sessions", "index": planned.index, "at_s": self.elapsed(),
                                        "error": str(exc)})
            return
        self.log.write("workload", {"kind": "restart_sessions", "index": planned.index, "at_s": self.elapsed(),
                                    "dag_run": run_id})

    def _carry_out(self, planned: Planned) -> None:
        try:
            if planned.kind == WorkloadKind.BURST:
                self._burst(planned)
            elif planned.kind == WorkloadKind.RESTART_SESSIONS:
                self._restart_sessions(planned)
            else:
                assert self.injector is not None
                self.log.write("fault", self.injector.run(planned).to_json())
        except Exception as exc:  # a fault that breaks the soak itself is recorded, not raised in a thread
            self.log.write("soak_error", {"index": planned.index, "kind": planned.kind, "at_s": self.elapsed(),
                                          "error": f"{type(exc).__name__}: {exc}"})

    # --- settling ---------------------------------------------------------------------------------------
    def _end_offsets(self, say: Callable[[str], None]) -> dict[str, dict[str, int]]:
        """Every site partition's exact end once the producers stopped (the broker's fetch answer)."""
        if self._producer_env is None:
            return {}
        settings = self._broker_settings()
        consumer = metadata_consumer(quiet(settings.kafka_client_config()))
        try:
            partitions = list_partitions(consumer, settings.topic_pattern, timeout=30)
            for _ in range(5):
                marks = watermarks_within(consumer, partitions, 60)
                if all(mark.exact for mark in marks.values()):
                    break
            ends: dict[str, dict[str, int]] = {}
            for tp, mark in marks.items():
                ends.setdefault(tp.topic, {})[str(tp.partition)] = mark.high
        finally:
            consumer.close()
        say(f"end offsets: {sum(sum(p.values()) for p in ends.values()):,} records in {len(partitions)} partitions")
        return ends

    def _catch_up(self, ends: dict[str, dict[str, int]], look: Callable[[], None],
                  say: Callable[[str], None]) -> float | None:
        assert self.settings is not None
        began = time.monotonic()
        checkpoint = self.settings.checkpoint_location
        wanted = {topic: {int(p): end for p, end in parts.items()} for topic, parts in ends.items()}
        while time.monotonic() - began < self.plan.settle_timeout_s:
            if caught_up(checkpoint, wanted):
                waited = round(time.monotonic() - began, 1)
                say(f"the stream caught up with every partition's end in {waited} s")
                return waited
            look()
            time.sleep(2)
        say(f"the stream did not catch up within {self.plan.settle_timeout_s:.0f} s")
        return None

    def _final_validation(self, look: Callable[[], None], say: Callable[[str], None]) -> dict[str, Any]:
        assert self.platform is not None
        try:
            run_id = self.platform.trigger(VALIDATION_DAG, {}, "soak: the final validation")
        except TargetMissingError as exc:
            return {"state": None, "error": str(exc)}
        began = time.monotonic()
        state = None
        while time.monotonic() - began < FINAL_VALIDATION_TIMEOUT_S:
            state = self.platform.run_state(VALIDATION_DAG, run_id)
            if state in ("success", "failed"):
                break
            look()
            time.sleep(5)
        say(f"final validate_output {run_id}: {state} after {time.monotonic() - began:.0f} s")
        return {"dag_run": run_id, "state": state, "took_s": round(time.monotonic() - began, 1)}
