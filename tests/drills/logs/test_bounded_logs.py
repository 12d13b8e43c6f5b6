"""Bounded logs: rendering, rollover, pruning and measuring on the real filesystem, and a drill on the real
stream (spark-submit, as the warden launches it) at a tiny rollover size."""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fixtures.stream_process import produce_raw
from streamwarden.local.broker import LocalBroker
from streamwarden.logs.bounds import JVM_LOG, PYTHON_LOG, ROLLED_LOG, LogBounds, log_files
from streamwarden.logs.log4j2 import render_log4j2_properties, write_log4j2_config
from streamwarden.logs.pruning import prune_logs
from streamwarden.logs.python_logging import configure_job_logging
from streamwarden.logs.rolling import roll_if_full
from streamwarden.logs.usage import measure_logs
from streamwarden.settings import Settings, load_settings
from streamwarden.settings_loading import SettingsError
from streamwarden.warden.launcher import read_launch_record, start_stream_detached
from streamwarden.warden.status import read_status
from streamwarden.warden.stop import stop_stream

DAY = 86400.0
PY4J_INFO = re.compile(r"INFO py4j\.")


def bounds_in(folder: Path, max_bytes: int = 1024, backups: int = 2, max_age: float = 7 * DAY) -> LogBounds:
    folder.mkdir(parents=True, exist_ok=True)
    return LogBounds(folder, max_bytes, backups, max_age)


def aged(path: Path, text: str, age: float) -> Path:
    path.write_text(text)
    stamp = time.time() - age
    os.utime(path, (stamp, stamp))
    return path


def test_the_log_settings_have_defaults_and_are_validated(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path)
    assert (settings.log_max_bytes, settings.log_backups, settings.log_max_age, settings.log_py4j) == (
        50 * 1024 * 1024, 5, 7 * DAY, False)
    given = load_settings(home=tmp_path, log_max_bytes=20480, log_backups=2, log_max_age="12h")
    assert LogBounds.of(given) == LogBounds(tmp_path / "run" / "logs", 20480, 2, 12 * 3600.0)
    assert LogBounds.of(given).per_log_bytes == 3 * 20480
    for bad in ({"log_max_bytes": 100}, {"log_backups": 0}, {"log_max_age": "a week"}):
        with pytest.raises(SettingsError, match="STREAMWARDEN_LOG_"):
            load_settings(home=tmp_path, **bad)


def test_the_log_settings_round_trip_through_the_environment(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path, log_max_age="7d", log_max_bytes=4096)
    env = settings.to_env()
    assert (env["STREAMWARDEN_LOG_MAX_AGE"], env["STREAMWARDEN_LOG_MAX_BYTES"]) == ("604800.0", "4096")
    assert load_settings(**{k.removeprefix("STREAMWARDEN_").lower(): v for k, v in env.items()}) == settings


def test_the_log4j2_config_rolls_by_size_keeps_a_count_and_an_age(tmp_path: Path) -> None:
    bounds = bounds_in(tmp_path / "logs", max_bytes=20480, backups=3, max_age=2 * DAY)
    text = render_log4j2_properties(bounds)
    properties = dict(line.split(" = ", 1) for line in text.splitlines() if " = " in line)
    assert properties["appender.rolling.fileName"] == str(bounds.folder / JVM_LOG)
    assert properties["appender.rolling.policies.size.size"] == "20480 B"
    assert properties["appender.rolling.strategy.max"] == "3"
    assert properties["appender.rolling.strategy.delete.name.glob"] == f"{JVM_LOG}.*"
    assert properties["appender.rolling.strategy.delete.name.any.age.age"] == "PT172800S"
    assert properties["appender.rolling.strategy.delete.name.any.count.exceeds"] == "3"
    assert properties["appender.console.filter.threshold.level"] == "warn"
    assert {"py4j", "org.sparkproject.jetty"} <= {v for k, v in properties.items() if k.endswith(".name")}
    path = write_log4j2_config(bounds)
    assert path.read_text() == text and path.stat().st_mode & 0o077 == 0


def test_job_logging_rotates_the_python_log_and_keeps_py4j_quiet(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    bounds = bounds_in(tmp_path / "logs", max_bytes=2048, backups=2)
    root = logging.getLogger()
    saved = (root.handlers[:], root.level, logging.getLogger("py4j.clientserver").level)
    try:
        configure_job_logging(bounds)
        logging.getLogger("py4j.clientserver").info("Received command c on object id p0")
        for i in range(200):
            logging.getLogger("streamwarden.stream.sink").info("batch %d committed", i)
        logging.getLogger("streamwarden.stream.runner").warning("a warning for the launch log")
        for handler in root.handlers:
            handler.flush()
    finally:
        for handler in root.handlers:
            handler.close()
        root.handlers[:], root.level = saved[0], saved[1]
        logging.getLogger("py4j.clientserver").setLevel(saved[2])
    files = sorted(p.name for p in bounds.folder.iterdir())
    assert files == [PYTHON_LOG, f"{PYTHON_LOG}.1", f"{PYTHON_LOG}.2"]
    assert all(p.stat().st_size <= bounds.max_bytes for p in bounds.folder.iterdir())
    text = "".join(p.read_text() for p in bounds.folder.iterdir())
    assert "batch 199 committed" in text and "Received command" not in text
    stderr = capsys.readouterr().err
    assert "a warning for the launch log" in stderr and "batch 199" not in stderr


def test_a_full_platform_log_rolls_over_in_place_and_its_writer_goes_on(tmp_path: Path) -> None:
    bounds = bounds_in(tmp_path / "logs", max_bytes=1024, backups=2)
    path = bounds.folder / "broker.log"
    with open(path, "ab", buffering=0) as writer:  # as a child's stdout: O_APPEND
        written = []
        for round_ in range(4):
            line = f"round {round_} ".encode() * 150
            writer.write(line)
            written.append(line)
            assert roll_if_full(path, bounds)
        writer.write(b"after")
        assert not roll_if_full(path, bounds)
    assert path.read_bytes() == b"after"
    assert (bounds.folder / "broker.log.1").read_bytes() == written[3]
    assert (bounds.folder / "broker.log.2").read_bytes() == written[2]
    assert sorted(p.name for p in bounds.folder.iterdir()) == ["broker.log", "broker.log.1", "broker.log.2"]
    assert not roll_if_full(bounds.folder / "absent.log", bounds)


def test_pruning_keeps_the_newest_launch_logs_and_live_logs(tmp_path: Path) -> None:
    bounds = bounds_in(tmp_path / "logs", backups=2, max_age=DAY)
    folder = bounds.folder
    launches = [aged(folder / f"stream-2026010{i}T000000.log", "launch", 60.0 * (9 - i)) for i in range(1, 6)]
    old_newest = aged(folder / "stream-20260109T000000.log", "running stream", 3 * DAY)
    live = [aged(folder / name, "live", 30 * DAY) for name in (JVM_LOG, PYTHON_LOG, "airflow.log")]
    rolled_kept = aged(folder / f"{JVM_LOG}.1", "rolled", 60)
    rolled_old = aged(folder / f"{PYTHON_LOG}.1", "rolled", 2 * DAY)
    rolled_extra = aged(folder / "broker.log.3", "rolled", 60)
    other = aged(folder / "notes.txt", "not a log", 30 * DAY)

    deleted = prune_logs(bounds)

    assert sorted(deleted) == sorted([*launches[:4], rolled_old, rolled_extra])
    assert sorted(folder.iterdir()) == sorted([launches[4], old_newest, *live, rolled_kept, other])
    assert prune_logs(bounds) == []
    assert prune_logs(bounds_in(tmp_path / "absent")) == []


def test_a_rolling_logs_files_are_listed_oldest_first(tmp_path: Path) -> None:
    for name in (PYTHON_LOG, f"{PYTHON_LOG}.1", f"{PYTHON_LOG}.10", f"{PYTHON_LOG}.2", f"{JVM_LOG}.1", "x.log.1"):
        (tmp_path / name).write_text(name)
    assert [p.name for p in log_files(tmp_path, PYTHON_LOG)] == [
        f"{PYTHON_LOG}.10", f"{PYTHON_LOG}.2", f"{PYTHON_LOG}.1", PYTHON_LOG]
    assert [p.name for p in log_files(tmp_path, JVM_LOG)] == [f"{JVM_LOG}.1"]


def test_usage_counts_every_file_under_the_logs_folder(tmp_path: Path) -> None:
    bounds = bounds_in(tmp_path / "logs", max_bytes=1024, backups=2)
    assert (measure_logs(bounds).bytes, measure_logs(bounds).files) == (0, 0)
    (bounds.folder / "a.log").write_bytes(b"x" * 100)
    (bounds.folder / "sub").mkdir()
    (bounds.folder / "sub" / "b.log").write_bytes(b"y" * 20)
    usage = measure_logs(bounds)
    assert (usage.bytes, usage.files, usage.per_log_bound_bytes) == (120, 2, 3 * 1024)
    assert usage.to_json()["folder"] == str(bounds.folder)


def test_status_reports_the_logs_folder(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path, log_max_bytes=4096, log_backups=3)
    (settings.run_paths.logs).mkdir(parents=True)
    (settings.run_paths.logs / "stream-20260101T000000.log").write_bytes(b"z" * 10)
    logs = read_status(settings).to_json()["logs"]
    assert logs == {"folder": str(settings.run_paths.logs), "bytes": 10, "files": 1, "max_bytes": 4096,
                    "backups": 3, "max_age_s": 7 * DAY, "per_log_bound_bytes": 4 * 4096}


# --- the drill: the real stream at a tiny rollover size ------------------------------------------------------

@pytest.fixture()
def drill_settings(tmp_path: Path, broker: LocalBroker, topic_factory: Callable[..., list[str]]) -> Iterator[Settings]:
    topics = topic_factory(2, partitions=2)
    settings = load_settings(home=tmp_path / "home", bootstrap_servers=broker.bootstrap_servers,
                             topic_pattern=f"{topics[0].rsplit('-', 1)[0]}-.*", pipeline="records",
                             trigger_interval="1s", spark_master="local[2]", shuffle_partitions=2,
                             log_max_bytes=1024, log_backups=2)
    yield settings
    stop_stream(settings, drain_timeout=60, term_timeout=10)


@pytest.mark.slow
def test_a_long_run_at_a_tiny_rollover_size_stays_under_the_bound(drill_settings: Settings) -> None:
    settings, bounds = drill_settings, LogBounds.of(drill_settings)
    topics = [f"{settings.topic_pattern.removesuffix('.*')}s{i}" for i in range(2)]
    bounds.folder.mkdir(parents=True)
    stale = [aged(bounds.folder / f"stream-2026010{i}T000000.log", "old launch", 60.0 * (9 - i)) for i in range(4)]
    producing = threading.Event()
    producing.set()

    def produce() -> None:
        while producing.is_set():
            produce_raw(settings.bootstrap_servers, topics, 400)
            time.sleep(0.3)

    producer = threading.Thread(target=produce, daemon=True)
    start_stream_detached(settings, lease_timeout=120)
    producer.start()
    largest = 0

    def first_python_file_rolled_away() -> bool:  # the job's first line is gone: rolled over 3 times or more
        kept = [p.read_text() for p in bounds.folder.glob(f"{PYTHON_LOG}*")]
        return bool(kept) and "lease taken" not in "".join(kept)

    try:
        deadline = time.monotonic() + 240  # ends as soon as the first file rolled away; a busy machine is slower
        while not first_python_file_rolled_away() and time.monotonic() < deadline:
            time.sleep(0.5)
            largest = max(largest, read_status(settings).logs.bytes)
    finally:
        producing.clear()
        producer.join(30)
    assert stop_stream(settings, drain_timeout=60, term_timeout=10).method.value == "drained"

    record = read_launch_record(settings)
    assert record is not None
    launch_log = Path(record.log_path)
    files = {p.name: p.stat().st_size for p in bounds.folder.iterdir()}
    print(f"logs at the end ({sum(files.values())} bytes, largest seen {largest}):", files)
    assert [p for p in stale if p.exists()] == stale[-bounds.backups:], "launch logs beyond the count are pruned"
    for log in (JVM_LOG, PYTHON_LOG):
        rolled = sorted(n for n in files if (m := ROLLED_LOG.match(n)) and m["log"] == log)
        assert rolled == [f"{log}.1", f"{log}.2"], f"{log} rolled over and kept {bounds.backups} files"
    # log4j rolls over before the event that finds the file full, so a JVM file may pass max_bytes by one event
    # (the largest: a query progress report, a few KB)
    one_event = 8 * 1024
    jvm_bound = bounds.per_log_bytes + (bounds.backups + 1) * one_event
    jvm = sum(size for name, size in files.items() if name.startswith(JVM_LOG))
    python = sum(size for name, size in files.items() if name.startswith(PYTHON_LOG))
    assert jvm <= jvm_bound and python <= bounds.per_log_bytes, (jvm, python)
    launch_allowance = 32 * 1024  # spark-submit's start-up lines before the job routes the JVM's logs
    assert files[launch_log.name] <= launch_allowance, launch_log.read_text()[-4000:]
    stale_launches = sum(p.stat().st_size for p in stale if p.exists())
    bound = jvm_bound + bounds.per_log_bytes + launch_allowance + stale_launches + files["log4j2-stream.properties"]
    assert largest <= bound and sum(files.values()) <= bound
    python_kept = "".join((bounds.folder / n).read_text() for n in files if n.startswith(PYTHON_LOG))
    assert "lease taken" not in python_kept and "drained and stopped" in python_kept, "older lines rolled away"
    text = "".join(p.read_text(errors="replace") for p in bounds.folder.iterdir())
    assert not PY4J_INFO.search(text), "py4j's per-call INFO lines are off by default"
    assert "StatusLogger" not in launch_log.read_text(), "log4j accepted the configuration"
    jvm_kept = "".join((bounds.folder / n).read_text() for n in files if n.startswith(JVM_LOG))
    assert re.search(r" INFO \w+: ", jvm_kept), "the driver JVM logs INFO to its rolling file"
