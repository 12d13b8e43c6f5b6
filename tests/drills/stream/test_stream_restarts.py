"""Restarts the checkpoint cannot save: a deleted checkpoint, explicit offsets, topics coming and going."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from fixtures.stream_process import StreamProcess, expected_ranges, produce_raw, stream_env
from streamwarden.failures import EXIT_ALREADY_RUNNING, EXIT_CODES, FailureClass
from streamwarden.kafka.admin import create_topics, delete_topics
from streamwarden.local.broker import LocalBroker
from streamwarden.runfiles.checkpoint import commit_batches
from streamwarden.runfiles.failure_file import read_failure
from streamwarden.testing.exactly_once import verify_table

pytestmark = pytest.mark.slow


def test_deleted_checkpoint_and_explicit_offsets_write_no_duplicate_and_lose_nothing(
    broker: LocalBroker, topic_factory: Callable[..., list[str]], tmp_path: Path
) -> None:
    topics = topic_factory(3, partitions=4)
    prefix = topics[0].rsplit("-", 1)[0]
    ends = produce_raw(broker.bootstrap_servers, topics, 90_000)
    job = StreamProcess(stream_env(tmp_path / "home", broker.bootstrap_servers, f"{prefix}-.*",
                                   max_offsets_per_trigger="20000"), tmp_path / "stream.log")
    checkpoint = job.settings.checkpoint_location
    table = job.settings.root("output") / "records"

    job.start()
    job.wait_until(lambda: len(commit_batches(checkpoint)) >= 2, 240, "two committed batches")
    assert job.stop() == 0, job.log_tail()
    partial = verify_table(table)
    assert partial.ok and 0 < partial.rows < 90_000, partial.summary()

    # The checkpoint is lost; restarting from earliest with other batch boundaries must skip what is
    # committed (also inside partially committed batches) and write the rest.
    shutil.rmtree(checkpoint)
    job.env["STREAMWARDEN_MAX_OFFSETS_PER_TRIGGER"] = "35000"
    job.start()
    job.wait_until(lambda: job.caught_up(ends), 300, "all offsets committed after the checkpoint loss")
    assert job.stop() == 0, job.log_tail()
    report = verify_table(table, expected_ranges(ends))
    assert report.ok, report.summary()
    assert "skipping already committed offsets" in job.log_tail(10**7)

    # Restart from explicit offsets in the middle of the committed data: nothing is written twice,
    # and new records still arrive.
    shutil.rmtree(checkpoint)
    middle = {t: {str(p): end // 2 for p, end in parts.items()} for t, parts in ends.items()}
    job.env["STREAMWARDEN_STARTING_OFFSETS"] = json.dumps(middle)
    more = produce_raw(broker.bootstrap_servers, topics, 3_000)
    job.start()
    job.wait_until(lambda: job.caught_up(more), 300, "new offsets after an explicit-offset restart")
    assert job.stop() == 0, job.log_tail()
    report = verify_table(table, expected_ranges(more))
    assert report.ok and report.rows == 93_000, report.summary()


def test_topics_are_discovered_and_pruned_while_running_and_strict_fails_on_deletion(
    broker: LocalBroker, topic_factory: Callable[..., list[str]], tmp_path: Path
) -> None:
    kafka = {"bootstrap.servers": broker.bootstrap_servers}
    first, doomed = topic_factory(2, partitions=4)
    prefix = first.rsplit("-", 1)[0]
    ends = produce_raw(broker.bootstrap_servers, [first, doomed], 4_000)
    job = StreamProcess(stream_env(tmp_path / "home", broker.bootstrap_servers, f"{prefix}-.*",
                                   integrity_tier="none"), tmp_path / "stream.log")
    job.start()
    job.wait_until(lambda: job.caught_up(ends), 240, "the initial topics")

    second = subprocess.run(
        [sys.executable, "-m", "streamwarden", "stream"], env=job.env, capture_output=True, text=True, timeout=120)
    assert second.returncode == EXIT_ALREADY_RUNNING
    assert "refusing to start a second instance" in second.stderr

    newcomer = f"{prefix}-s9"
    create_topics(kafka, [newcomer], partitions=2)
    ends.update(produce_raw(broker.bootstrap_servers, [newcomer], 1_000))
    job.wait_until(lambda: job.caught_up(ends), 120, "the topic created mid-run")

    delete_topics(kafka, [doomed])
    ends.update(produce_raw(broker.bootstrap_servers, [first], 2_000))
    job.wait_until(lambda: job.caught_up({first: ends[first]}), 120, "records after a topic deletion",
                   heal_source_death=True)
    assert doomed not in job.committed(), "the deleted topic is pruned from the offsets"
    assert "pruned from the offsets" in job.log_tail(10**7)
    assert job.stop() == 0, job.log_tail()
    final = {t: {p: (0, end) for p, end in parts.items()} for t, parts in ends.items()}
    report = verify_table(job.settings.root("output") / "records", final)
    assert report.ok, report.summary()

    # In the strict tier a vanished topic is DATA_LOSS, not a warning.
    job.env["STREAMWARDEN_INTEGRITY_TIER"] = "strict"
    job.start()
    job.wait_until(lambda: job.settings.run_paths.heartbeat.exists() and job.checkpoint_settled(), 240, "restart")
    delete_topics(kafka, [first])
    assert job.wait_exit_healing(180) == EXIT_CODES[FailureClass.DATA_LOSS], job.log_tail()
    failure = read_failure(job.settings.run_paths.failure)
    assert failure is not None and failure.failure_class is FailureClass.DATA_LOSS
    assert failure.topic == first and failure.partition is not None
