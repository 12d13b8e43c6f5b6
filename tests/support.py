"""Helpers shared by the end-to-end stream tests: fast raw producing and driving the real job process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import Producer

from streamwarden.failures import EXIT_CODES, FailureClass
from streamwarden.processes import group_members
from streamwarden.runfiles.checkpoint import commit_batches, committed_offsets, offset_batches
from streamwarden.runfiles.failure_file import read_failure
from streamwarden.runfiles.heartbeat import read_heartbeat
from streamwarden.settings import Settings, load_settings
from streamwarden.tables.location import QUARANTINE, SESSION_ROWS
from streamwarden.testing.exactly_once import verify_table
from streamwarden.testing.replay import caught_up, offsets_by_table


def produce_raw(bootstrap: str, topics: Sequence[str], count: int, keys: int = 997,
                value_size: int = 64) -> dict[str, dict[int, int]]:
    """Send ``count`` keyed records round-robin over ``topics``; returns the log end per partition."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000,
                         "queue.buffering.max.messages": 500000, "enable.idempotence": False})
    ends: dict[str, dict[int, int]] = {}
    errors: list[str] = []

    def delivered(err: object, msg: object) -> None:
        if err is not None:
            errors.append(str(err))
            return
        part = ends.setdefault(msg.topic(), {})  # type: ignore[attr-defined]
        part[msg.partition()] = max(part.get(msg.partition(), 0), msg.offset() + 1)  # type: ignore[attr-defined]

    pad = b"x" * value_size
    for i in range(count):
        while True:
            try:
                producer.produce(topics[i % len(topics)], key=b"k%d" % (i % keys), value=b"%d:" % i + pad,
                                 on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 20000 == 0:
            producer.poll(0)
    producer.flush(60)
    assert not errors, errors[:5]
    return ends


def settings_of(env: dict[str, str]) -> Settings:
    """The settings a process with environment ``env`` reads (only its ``STREAMWARDEN_*`` variables count)."""
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("STREAMWARDEN_")}
    os.environ.update({k: v for k, v in env.items() if k.startswith("STREAMWARDEN_")})
    try:
        return load_settings()
    finally:
        for key in [k for k in os.environ if k.startswith("STREAMWARDEN_")]:
            del os.environ[key]
        os.environ.update(saved)


@dataclass
class StreamProcess:
    """The real ``streamwarden stream`` in its own process group, driven like an operator would."""

    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    runs: list[int] = field(default_factory=list)

    @property
    def settings(self) -> Settings:
        """The settings the job process sees (read from its environment, as it does)."""
        return settings_of(self.env)

    def start(self, **extra_env: str) -> StreamProcess:
        env = {**self.env, **extra_env}
        with open(self.log_path, "ab") as log:
            log.write(f"\n==== start {extra_env} ====\n".encode())
            self.process = subprocess.Popen([sys.executable, "-m", "streamwarden", "stream"], env=env,
                                            stdout=log, stderr=log, start_new_session=True)
        return self

    def wait_exit(self, timeout: float) -> int:
        assert self.process is not None
        code = self.process.wait(timeout)
        self._reap_group()
        self.runs.append(code)
        return code

    def kill9(self) -> None:
        """SIGKILL the whole job: the driver's Python, its JVM and the Python workers."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.wait_exit(30)

    def _reap_group(self) -> None:
        assert self.process is not None
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 15
        while group_members(self.process.pid) and time.monotonic() < deadline:
            time.sleep(0.1)

    def stop(self, timeout: float = 120) -> int:
        """Graceful stop through the marker; returns the exit code."""
        self.settings.run_paths.stop_marker.touch()
        return self.wait_exit(timeout)

    def wait_until(self, predicate: Callable[[], bool], timeout: float, what: str,
                   heal_source_death: bool = False) -> None:
        """Poll ``predicate``; an exit fails the wait, except, with ``heal_source_death``, the death of the
        source's Python process, which is restarted as the warden restarts it (see :meth:`healed`)."""
        deadline = time.monotonic() + timeout
        while not predicate():
            if heal_source_death and self.healed():
                continue
            if self.process is not None and self.process.poll() is not None:
                raise AssertionError(f"stream exited ({self.process.returncode}) while waiting for {what}; "
                                     f"log tail:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}; log:\n{self.log_tail()}")
            time.sleep(0.5)

    def healed(self) -> bool:
        """True when the job had exited because its source's Python process died and is started again, as the
        warden starts an ENVIRONMENT failure again. On the embedded broker a topic deleted while the source
        fetches it can crash the Kafka client (librdkafka on Tansu's answer for a topic id it no longer knows)."""
        if self.process is None or self.process.poll() != EXIT_CODES[FailureClass.ENVIRONMENT]:
            return False
        failure = read_failure(self.settings.run_paths.failure)
        if failure is None or not failure.message.startswith("the Kafka source's Python process died"):
            return False
        self.wait_exit(30)
        self.start()
        return True

    def wait_exit_healing(self, timeout: float) -> int:
        """The exit code, through the source's process deaths (:meth:`healed`)."""
        deadline = time.monotonic() + timeout
        while True:
            assert self.process is not None
            code = self.process.wait(max(1.0, deadline - time.monotonic()))
            if not self.healed():
                self.wait_exit(30)
                return code

    def query_started(self) -> bool:
        """The current process has started its query (its heartbeat says so)."""
        beat = read_heartbeat(self.settings.run_paths.heartbeat)
        return self.process is not None and beat is not None and beat.pid == self.process.pid

    def committed(self) -> dict[str, dict[str, int]]:
        return committed_offsets(self.settings.checkpoint_location) or {}

    def caught_up(self, ends: dict[str, dict[int, int]]) -> bool:
        return caught_up(self.settings.checkpoint_location, ends)

    def checkpoint_settled(self) -> bool:
        planned = offset_batches(self.settings.checkpoint_location)
        return bool(planned) and commit_batches(self.settings.checkpoint_location)[-1:] == planned[-1:]

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]


def stream_env(home: Path, bootstrap: str, pattern: str, pipeline: str = "records", **settings: str) -> dict[str, str]:
    """Environment for a job process: STREAMWARDEN_* settings on ``home`` plus the venv's Python."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMWARDEN_")}
    env.update({
        "STREAMWARDEN_HOME": str(home),
        "STREAMWARDEN_BOOTSTRAP_SERVERS": bootstrap,
        "STREAMWARDEN_TOPIC_PATTERN": pattern,
        "STREAMWARDEN_PIPELINE": pipeline,
        "STREAMWARDEN_TRIGGER_INTERVAL": "1s",
        "STREAMWARDEN_SPARK_MASTER": "local[2]",
        "STREAMWARDEN_SHUFFLE_PARTITIONS": "2",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    })
    env.update({f"STREAMWARDEN_{k.upper()}": v for k, v in settings.items()})
    return env


def expected_ranges(ends: dict[str, dict[int, int]]) -> dict[str, dict[int, tuple[int, int]]]:
    return {t: {p: (0, end) for p, end in parts.items()} for t, parts in ends.items()}


def all_offsets(bootstrap: str, topics: list[str]) -> set[tuple[str, int, int]]:
    """Every (topic, partition, offset) the broker holds for ``topics``."""
    from streamwarden.kafka.admin import fetch_high_watermarks, list_partitions, metadata_consumer

    consumer = metadata_consumer({"bootstrap.servers": bootstrap})
    try:
        marks = fetch_high_watermarks(consumer, [tp for tp in list_partitions(consumer, "|".join(topics))])
    finally:
        consumer.close()
    return {(tp.topic, tp.partition, o) for tp, (low, high) in marks.items() for o in range(low, high)}


def assert_offsets_accounted(output: Path, expected: set[tuple[str, int, int]]) -> None:
    """Each offset in exactly one of ``session_rows`` and ``quarantine``, and no other offset.

    Both Delta tables are read through their logs; each log must also be sound: every file it lists is
    there, and every row lies inside the offsets it records as committed. (``session_rows`` has several
    rows per offset, so the duplicates ``verify_table`` counts are not a finding here.)
    """
    found = offsets_by_table(output, [SESSION_ROWS, QUARANTINE])
    assert not found[SESSION_ROWS] & found[QUARANTINE], "an offset landed in both tables"
    assert found[SESSION_ROWS] | found[QUARANTINE] == expected, "an offset was dropped or invented"
    for name in (SESSION_ROWS, QUARANTINE):
        report = verify_table(output / name)
        assert not report.problems, report.summary()


def log_ends(offsets: set[tuple[str, int, int]]) -> dict[str, dict[int, int]]:
    """``{topic: {partition: end}}`` of a set of (topic, partition, offset)."""
    ends: dict[str, dict[int, int]] = {}
    for topic, partition, offset in offsets:
        ends.setdefault(topic, {})[partition] = max(ends.get(topic, {}).get(partition, 0), offset + 1)
    return ends


def use_stream_env(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], warden: dict[str, str] | None = None) -> None:
    """Make ``env``'s ``STREAMWARDEN_*`` variables (and only those) this process's, with the warden's settings
    (``STREAMWARDEN_WARDEN_<name>``) and the Spark connection the hook builds spark-submit from (local[2])."""
    for name in [n for n in os.environ if n.startswith("STREAMWARDEN_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        if name.startswith("STREAMWARDEN_"):
            monkeypatch.setenv(name, value)
    for name, value in (warden or {}).items():
        monkeypatch.setenv(f"STREAMWARDEN_WARDEN_{name}", value)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
