"""Health verdicts from real files (lease held by this process, heartbeat, checkpoint) and a real broker."""

from __future__ import annotations

import json
import os
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from fixtures.stream_process import produce_raw
from streamwarden.failures import FailureClass, FailureDocument
from streamwarden.kafka.admin import create_topics
from streamwarden.local.broker import LocalBroker
from streamwarden.runfiles.failure_file import write_failure
from streamwarden.runfiles.heartbeat import Heartbeat, write_heartbeat
from streamwarden.runfiles.lease import CheckpointLease
from streamwarden.settings import Settings, load_settings
from streamwarden.testing.faults import CHAOS_RAISE_ENV
from streamwarden.warden.health import HealthVerdict, Overall, assess
from streamwarden.warden.lag import LagStatus
from streamwarden.warden.settings import WardenSettings, load_warden_settings

WARDEN = load_warden_settings(heartbeat_floor=30, startup_grace=20, lag_window=3)


@pytest.fixture()
def settings(tmp_path: Path, broker: LocalBroker) -> Settings:
    return load_settings(home=tmp_path, bootstrap_servers=broker.bootstrap_servers,
                         topic_pattern=f"h{uuid.uuid4().hex[:8]}-.*", trigger_interval="1s")


def _commit(settings: Settings, batch: int, offsets: dict[str, dict[str, int]]) -> None:
    checkpoint = settings.checkpoint_location
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "commits").mkdir(parents=True, exist_ok=True)
    (checkpoint / "offsets" / str(batch)).write_text(f"v1\n{{}}\n{json.dumps(offsets)}\n")
    (checkpoint / "commits" / str(batch)).write_text("v1\n{}\n")


def _beat(settings: Settings, batch: int, at: float | None = None, **fields: float) -> None:
    written = datetime.fromtimestamp(at or time.time(), UTC).isoformat()
    fields = {"batch_duration_ms": 500, "process_batches": 5, **fields}
    write_heartbeat(settings.run_paths.heartbeat, Heartbeat("progress", "q", "r", os.getpid(), batch_id=batch,
                                                       written_at=written, trigger_interval_s=1.0,
                                                       **fields))  # type: ignore[arg-type]


def _judge(settings: Settings, warden: WardenSettings = WARDEN, now: float | None = None) -> HealthVerdict:
    assessment = assess(settings, warden, now)
    assessment.commit()
    verdict = assessment.verdict
    document = json.loads(json.dumps(verdict.to_json()))
    assert HealthVerdict.from_json(document) == verdict, "JSON round trip"
    assert HealthVerdict.from_json(document).to_json() == document, "the flat JSON form (XCom) is kept"
    return verdict


def test_not_running_is_dead_or_failed_with_its_class(settings: Settings) -> None:
    verdict = _judge(settings)
    assert (verdict.overall, verdict.alive, verdict.restartable) == (Overall.DEAD, False, True)
    assert verdict.lag.partitions == [] and verdict.lag.broker_error is None

    write_failure(settings.run_paths.failure, FailureDocument(FailureClass.INTEGRITY, "gap", 82, "t", 0, 5))
    verdict = _judge(settings)
    assert verdict.label == "FAILED(INTEGRITY)" and not verdict.restartable
    assert verdict.failure is not None and verdict.failure.offset == 5
    assert verdict.to_json()["failure"]["offset"] == 5 and verdict.to_json()["failure_class"] == "INTEGRITY"
    write_failure(settings.run_paths.failure, FailureDocument(FailureClass.ENVIRONMENT, "broker down", 75))
    assert _judge(settings).restartable


def test_running_stream_healthy_then_lagging_then_hung(settings: Settings) -> None:
    prefix = settings.topic_pattern.removesuffix("-.*")
    create_topics({"bootstrap.servers": settings.bootstrap_servers}, [f"{prefix}-s0"], partitions=2)
    ends = produce_raw(settings.bootstrap_servers, [f"{prefix}-s0"], 1000)
    topic = f"{prefix}-s0"
    with CheckpointLease(settings.lease_path, settings.checkpoint_location):
        verdict = _judge(settings)
        assert verdict.overall is Overall.STARTING, "lease taken, no heartbeat of this process yet"

        _commit(settings, 0, {topic: {str(p): end for p, end in ends[topic].items()}})
        _beat(settings, 0)
        verdict = _judge(settings)
        assert verdict.overall is Overall.HEALTHY, verdict.table()
        assert (verdict.alive, verdict.pid, verdict.progressing, verdict.lag.total_lag) == (True, os.getpid(), True, 0)
        assert verdict.progress_threshold_s == 30 and verdict.lag.lag_status is LagStatus.OK
        assert [p.lag for p in verdict.lag.partitions] == [0, 0]
        assert verdict.heartbeat.last_batch_id == 0 and verdict.to_json()["last_batch_id"] == 0
        assert "HEALTHY" in verdict.table() and f"{topic}[1]" in verdict.table()

        more = produce_raw(settings.bootstrap_servers, [topic], 600)
        t0 = time.time()
        verdict = _judge(settings, now=t0)
        lag = sum(more[topic].values()) - sum(ends[topic].values())
        assert (verdict.lag.total_lag, verdict.lag.max_lag) == (
            lag, max(more[topic][p] - ends[topic][p] for p in (0, 1)))
        assert all(p.oldest_unprocessed_age_s is not None and 0 <= p.oldest_unprocessed_age_s < 60
                   for p in verdict.lag.partitions)
        assert {p.retention_ms for p in verdict.lag.partitions} == {7 * 24 * 3600 * 1000}
        assert not verdict.lag.retention_at_risk and verdict.overall is Overall.HEALTHY

        # A slow batch while records wait: not keeping up, unless it was the process's first (it warms up).
        # (judged without keeping the lag window: the steps below count on it)
        _beat(settings, 0, batch_duration_ms=10_000, process_batches=1)
        assert assess(settings, WARDEN, t0 + 0.5).verdict.overall is Overall.HEALTHY
        _beat(settings, 0, batch_duration_ms=10_000, process_batches=2)
        verdict = assess(settings, WARDEN, t0 + 0.6).verdict
        assert verdict.overall is Overall.DEGRADED and not verdict.keeping_up, verdict.table()
        assert verdict.reasons == ["batch took 10000 ms > 3 x trigger"]
        # A batch processing slower than the input came in: noise while the oldest waiting record is younger
        # than 3 triggers, not keeping up once it is older.
        rates = {"processed_rows_per_second": 100.0, "input_rows_per_second": 200.0}
        _beat(settings, 0, **rates)
        assert assess(settings, WARDEN, t0 + 0.7).verdict.overall is Overall.HEALTHY
        _beat(settings, 0, at=t0 + 9.5, **rates)
        verdict = assess(settings, WARDEN, t0 + 10).verdict
        assert verdict.overall is Overall.DEGRADED and not verdict.keeping_up, verdict.table()
        assert verdict.reasons == ["processing 100 rows/s < 0.8 x input 200 rows/s"]
        _beat(settings, 0)

        # With a week of retention, a threshold of a tiny fraction of it puts these records at risk.
        risky = WARDEN.model_copy(update={"retention_risk": 1e-8})
        assert _judge(settings, risky, now=t0 + 1).lag.retention_at_risk

        # Fresh idle heartbeats, but the batch id has not moved for longer than the threshold while
        # records wait: not progressing; once no zero-lag observation is left in the window, Burrow says STOP.
        _beat(settings, 0, at=t0 + 40)
        verdict = _judge(settings, now=t0 + 41)
        assert verdict.overall is Overall.HUNG and not verdict.progressing, verdict.table()
        assert "batch 0 unchanged" in verdict.reasons[0]
        assert verdict.lag.lag_status is LagStatus.STOP

        # The heartbeat itself goes stale.
        verdict = _judge(settings, now=t0 + 80)
        assert verdict.overall is Overall.HUNG and any("heartbeat is" in r for r in verdict.reasons)


def test_unreachable_broker_is_reported_not_raised_and_the_lag_is_unknown_not_zero(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path, bootstrap_servers="127.0.0.1:9")
    verdict = _judge(settings, load_warden_settings(broker_timeout=2))
    assert verdict.overall is Overall.DEAD and verdict.lag.broker_error and not verdict.lag.measured
    assert verdict.lag.lag_status is LagStatus.UNKNOWN, "not Burrow's ERR: no offset was judged"
    document = verdict.to_json()
    assert (document["total_lag"], document["max_lag"], document["lag_status"]) == (None, None, "UNKNOWN")
    lag_row = next(line for line in verdict.table().splitlines() if line.startswith("lag "))
    assert "not measured, the broker could not be asked" in lag_row and "total" not in lag_row, lag_row


def test_a_stopped_streams_lag_is_measured_from_its_checkpoint_and_the_broker(settings: Settings) -> None:
    """No process holds the lease: the lag is still the broker's high watermarks against the checkpoint's
    committed position, and the table prints the heartbeat's limit as a number."""
    topic = f"{settings.topic_pattern.removesuffix('-.*')}-s0"
    create_topics({"bootstrap.servers": settings.bootstrap_servers}, [topic], partitions=2)
    ends = produce_raw(settings.bootstrap_servers, [topic], 300)[topic]
    _commit(settings, 4, {topic: {"0": 10, "1": 20}})
    _beat(settings, 4, at=time.time() - 600)  # the last heartbeat of the stream, ten minutes ago

    verdict = _judge(settings)

    assert verdict.overall is Overall.DEAD and verdict.lag.measured and not verdict.lag.lower_bound
    assert [(p.partition, p.committed, p.high_watermark, p.lag) for p in verdict.lag.partitions] == [
        (0, 10, ends[0], ends[0] - 10), (1, 20, ends[1], ends[1] - 20)]
    assert verdict.lag.total_lag == ends[0] + ends[1] - 30
    table = verdict.table()
    assert "None" not in table, table
    assert f"total {ends[0] + ends[1] - 30:,}" in table and "(limit 30s)" in table, table
    assert "not running (last heartbeat: in 0.0/s" in table, "a stopped stream's rates are said to be history"


def test_a_failed_fetch_based_query_falls_back_to_listed_watermarks_said_so(
        settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fetch-based watermark query fails (as it did against a long log on the embedded broker): the lag
    comes from ListOffsets, a lower bound said so, never ``ERR`` with a total of 0."""
    topic = f"{settings.topic_pattern.removesuffix('-.*')}-s0"
    create_topics({"bootstrap.servers": settings.bootstrap_servers}, [topic], partitions=2)
    ends = produce_raw(settings.bootstrap_servers, [topic], 300)[topic]
    _commit(settings, 0, {topic: {"0": 0, "1": 0}})
    monkeypatch.setenv(CHAOS_RAISE_ENV, "watermarks_fetch:ENVIRONMENT")

    verdict = _judge(settings)

    lag = verdict.lag
    assert lag.measured and lag.lower_bound and lag.lag_status is not LagStatus.ERR, verdict.table()
    assert lag.broker_notes and "fetch-based query failed: ENVIRONMENT: chaos" in lag.broker_notes[0]
    assert 0 < lag.total_lag <= sum(ends.values()), "ListOffsets' end is at most the log's"
    assert all(0 < p.lag <= ends[p.partition] for p in lag.partitions)
    assert f"total at least {lag.total_lag:,}" in verdict.table() and "high (>=)" in verdict.table()
    assert verdict.overall is Overall.DEAD and verdict.reasons == ["no live process holds the checkpoint lease"]


def test_a_new_start_is_not_judged_stalled_before_its_first_commit(settings: Settings) -> None:
    """The first batch of a start runs with records waiting and nothing committed yet: the lag is STARTING (no
    alarm) until the start's first commit, and Burrow's window then holds only the checks of this start."""
    prefix = settings.topic_pattern.removesuffix("-.*")
    topic = f"{prefix}-s0"
    create_topics({"bootstrap.servers": settings.bootstrap_servers}, [topic], partitions=2)
    ends = produce_raw(settings.bootstrap_servers, [topic], 400)
    _commit(settings, 0, {topic: {"0": 0, "1": 0}})  # a previous start committed nothing of them
    t0 = time.time()
    with CheckpointLease(settings.lease_path, settings.checkpoint_location):
        write_heartbeat(settings.run_paths.heartbeat,
                        Heartbeat("started", "q", "r", os.getpid(), trigger_interval_s=1.0))
        for i in range(4):  # longer than the window, the first batch still running
            verdict = _judge(settings, now=t0 + 5 * i)
            assert verdict.lag.lag_status is LagStatus.STARTING, verdict.table()
            assert verdict.overall is Overall.HEALTHY and verdict.reasons == [], verdict.table()
            assert verdict.progress_threshold_s == WARDEN.startup_grace, "first batch: the start-up grace"
        assert json.loads(settings.root("run").joinpath("warden", "health.json").read_text())["lag"] == {
            f"{topic}:0": [], f"{topic}:1": []}, "no window before the first commit"

        time.sleep(0.05)  # the commit file's time is after the lease's
        _commit(settings, 1, {topic: {str(p): end for p, end in ends[topic].items()}})
        _beat(settings, 1, at=t0 + 40)
        verdict = _judge(settings, now=t0 + 41)
        assert verdict.lag.lag_status is LagStatus.OK and verdict.overall is Overall.HEALTHY, verdict.table()
        windows = json.loads(settings.root("run").joinpath("warden", "health.json").read_text())["lag"]
        assert [len(rows) for rows in windows.values()] == [1, 1]
