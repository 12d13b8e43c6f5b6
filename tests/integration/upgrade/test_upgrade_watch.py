"""The upgrade's health watch on real files (lease held by this process, heartbeat, checkpoint) and a real broker:
the new version's first batch warms up within the start-up grace before the window's "no batch committed" rule
applies."""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

from fixtures.stream_process import produce_raw
from streamwarden.failures import FailureClass, FailureDocument
from streamwarden.kafka.admin import create_topics
from streamwarden.local.broker import LocalBroker
from streamwarden.runfiles.failure_file import write_failure
from streamwarden.runfiles.heartbeat import Heartbeat, write_heartbeat
from streamwarden.runfiles.lease import CheckpointLease
from streamwarden.settings import load_settings
from streamwarden.upgrade import steps
from streamwarden.upgrade.journal import Journal
from streamwarden.warden.health import Overall
from streamwarden.warden.settings import load_warden_settings

WARDEN = load_warden_settings(heartbeat_floor=30, startup_grace=60)


def _commit(checkpoint: Path, batch: int, offsets: dict[str, dict[str, int]]) -> None:
    for folder in ("offsets", "commits"):
        (checkpoint / folder).mkdir(parents=True, exist_ok=True)
    (checkpoint / "offsets" / str(batch)).write_text(f"v1\n{{}}\n{json.dumps(offsets)}\n")
    (checkpoint / "commits" / str(batch)).write_text("v1\n{}\n")


def test_the_watch_waits_for_the_first_batch_then_wants_a_commit(tmp_path: Path, broker: LocalBroker) -> None:
    settings = load_settings(home=tmp_path, bootstrap_servers=broker.bootstrap_servers,
                             topic_pattern=f"u{uuid.uuid4().hex[:8]}-.*", trigger_interval="1s")
    topic = settings.topic_pattern.removesuffix(".*") + "s0"
    create_topics({"bootstrap.servers": settings.bootstrap_servers}, [topic], partitions=1)
    ends = produce_raw(settings.bootstrap_servers, [topic], 300)
    _commit(settings.checkpoint_location, 0, {topic: {"0": 100}})  # the old version's last commit
    journal = Journal.open(settings, "drill")
    journal.put("started", {"pid": os.getpid(), "at": time.time(), "last_commit": 0})
    t0 = time.time()
    with CheckpointLease(settings.lease_path, settings.checkpoint_location):
        write_heartbeat(settings.run_paths.heartbeat,
                        Heartbeat("started", "q", "r", os.getpid(), trigger_interval_s=1.0))
        assert not steps.watch(settings, WARDEN, journal, minutes=0.25, now=t0).done  # the window opens
        looked = steps.watch(settings, WARDEN, journal, minutes=0.25, now=t0 + 20)
        assert not looked.done and "first batch is still running" in looked.reason, looked.reason
        assert looked.verdict.overall is Overall.HEALTHY

        time.sleep(0.05)
        _commit(settings.checkpoint_location, 1, {topic: {"0": ends[topic][0]}})
        write_heartbeat(settings.run_paths.heartbeat, Heartbeat("progress", "q", "r", os.getpid(), batch_id=1,
                                                           trigger_interval_s=1.0, process_batches=1))
        looked = steps.watch(settings, WARDEN, journal, minutes=0.25, now=t0 + 21)
        assert looked.done and looked.healthy, looked.reason


def test_a_first_batch_past_the_grace_is_hung(tmp_path: Path, broker: LocalBroker) -> None:
    settings = load_settings(home=tmp_path, bootstrap_servers=broker.bootstrap_servers,
                             topic_pattern=f"u{uuid.uuid4().hex[:8]}-.*", trigger_interval="1s")
    journal = Journal.open(settings, "drill")
    journal.put("started", {"pid": os.getpid(), "at": time.time(), "last_commit": None})
    with CheckpointLease(settings.lease_path, settings.checkpoint_location):
        write_heartbeat(settings.run_paths.heartbeat,
                        Heartbeat("started", "q", "r", os.getpid(), trigger_interval_s=1.0))
        looked = steps.watch(settings, WARDEN, journal, minutes=0.25, now=time.time() + 61)
    assert looked.done and not looked.healthy and looked.verdict.overall is Overall.HUNG, looked.reason


def test_a_new_version_that_failed_with_environment_is_started_again_before_the_release_is_blamed(
        tmp_path: Path, broker: LocalBroker) -> None:
    settings = load_settings(home=tmp_path, bootstrap_servers=broker.bootstrap_servers,
                             topic_pattern=f"u{uuid.uuid4().hex[:8]}-.*", trigger_interval="1s")
    journal = Journal.open(settings, "drill")
    journal.put("started", {"pid": 999_999, "at": time.time(), "last_commit": None})
    starts: list[int] = []

    def restart() -> int:
        starts.append(len(starts))
        write_failure(settings.run_paths.failure, FailureDocument(  # the broker still does not answer
            FailureClass.ENVIRONMENT, "the broker did not answer within 30s before the stream started", 75,
            pid=999_999))
        return 999_999

    restart()
    starts.clear()
    for attempt in range(1, steps.ENVIRONMENT_RESTARTS + 1):
        looked = steps.watch(settings, WARDEN, journal, minutes=0.25, restart=restart)
        assert not looked.done and f"started again (pid 999999, {attempt} of" in looked.reason, looked.reason
    looked = steps.watch(settings, WARDEN, journal, minutes=0.25, restart=restart)
    assert looked.done and not looked.healthy and len(starts) == steps.ENVIRONMENT_RESTARTS
    assert "FAILED(ENVIRONMENT)" in looked.reason

    write_failure(settings.run_paths.failure, FailureDocument(FailureClass.BUG, "RuntimeError: v3", 70, pid=999_999))
    journal.put("environment_restarts", 0)
    looked = steps.watch(settings, WARDEN, journal, minutes=0.25, restart=restart)
    assert looked.done and not looked.healthy and "FAILED(BUG)" in looked.reason  # the release's own failure
