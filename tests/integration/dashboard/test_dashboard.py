"""The Streamwarden page's figures from real run files and real Delta tables: a running stream, a failed one,
a failed validation, alerts with the DAG and Params to trigger, the series, the JSON, Prometheus text and HTML."""

from __future__ import annotations

import json
import os
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from fixtures.sink_batches import run_batch
from streamwarden.alerts import Alert, dispatch
from streamwarden.dashboard import page, prometheus
from streamwarden.dashboard.alerts_now import dag_actions
from streamwarden.dashboard.model import DagAction, Dashboard
from streamwarden.dashboard.series import series, throughput
from streamwarden.dashboard.snapshot import DashboardSource, Sources, snapshot
from streamwarden.dashboard.tables_now import data_docs_file
from streamwarden.failures import FailureClass, FailureDocument
from streamwarden.local.broker import LocalBroker
from streamwarden.maintenance.settings import load_maintenance_settings
from streamwarden.runfiles.failure_file import write_failure
from streamwarden.runfiles.heartbeat import Heartbeat, write_heartbeat
from streamwarden.runfiles.lease import CheckpointLease
from streamwarden.session_restarts.settings import load_restart_settings
from streamwarden.settings import Settings, load_settings
from streamwarden.tables.commit_rate import RATE_COMMITS, MeasuredRate, history_rate
from streamwarden.tables.location import QUARANTINE, SESSION_ROWS
from streamwarden.tables.reading import summarize
from streamwarden.testing.faults import CHAOS_RAISE_ENV
from streamwarden.validation.findings import Finding, FindingClass
from streamwarden.validation.report import ValidationReport, record_last_validated, write_report
from streamwarden.warden.decision import RECOVERY
from streamwarden.warden.health import assess
from streamwarden.warden.lag_history import KEEP_S, LagSample, append_lag_sample, read_lag_history
from streamwarden.warden.settings import load_warden_settings
from streamwarden.warden.status import read_status

WARDEN = load_warden_settings(heartbeat_floor=30, startup_grace=20, lag_window=3, broker_timeout=5)
RANGES = {"sites-a": {0: (0, 120), 1: (10, 60)}, "sites-b": {0: (0, 30)}}


@pytest.fixture()
def settings(tmp_path: Path, broker: LocalBroker) -> Settings:
    return load_settings(home=tmp_path, bootstrap_servers=broker.bootstrap_servers,
                         topic_pattern=f"d{uuid.uuid4().hex[:8]}-.*", trigger_interval="1s")


def sources(settings: Settings) -> Sources:
    return Sources(settings, WARDEN, load_restart_settings(schedule="@hourly"), load_maintenance_settings())


def tables(settings: Settings) -> None:
    """session_rows and quarantine as the stream's sink commits them (two batches)."""
    run_batch(settings.root("output"), [SESSION_ROWS, QUARANTINE], RANGES, batch_id=0)
    run_batch(settings.root("output"), [SESSION_ROWS, QUARANTINE], {"sites-a": {0: (120, 150)}}, batch_id=1)


def beat(settings: Settings, batch: int) -> None:
    write_heartbeat(settings.run_paths.heartbeat, Heartbeat(
        "progress", "q", "r", os.getpid(), batch_id=batch, written_at=datetime.now(UTC).isoformat(),
        trigger_interval_s=1.0, input_rows_per_second=250.0, processed_rows_per_second=240.0,
        batch_duration_ms=420, process_batches=5))  # type: ignore[call-arg]


def failed_validation(settings: Settings, versions: dict[str, int], passed: bool) -> None:
    findings = () if passed else (Finding(FindingClass.GAP, SESSION_ROWS, "sites-a", 0, ((5, 6),), 1, "offset 5"),)
    report = ValidationReport(f"run-{passed}", datetime.now(UTC).isoformat(), datetime.now(UTC).isoformat(),
                              ("coverage", "expectations"), versions, None, (), (), (), findings, (),
                              data_docs=str(settings.run_paths.data_docs / "index.html"),
                              rows_checked={name: f"{name}: every row" for name in versions})
    folder = settings.run_paths.validation
    record_last_validated(folder, report, write_report(folder, report))
    time.sleep(0.01)  # the next report's file name is later


def test_a_running_stream_its_tables_and_a_failed_validation(settings: Settings) -> None:
    tables(settings)
    failed_validation(settings, {SESSION_ROWS: 1, QUARANTINE: 1}, passed=True)
    failed_validation(settings, {SESSION_ROWS: 2, QUARANTINE: 2}, passed=False)
    state_before = settings.run_paths.health.exists()
    with CheckpointLease(settings.lease_path, settings.checkpoint_location):
        beat(settings, 7)
        dashboard = snapshot(sources(settings))
        status = read_status(settings)

    assert not settings.run_paths.health.exists() and not state_before, "the page never commits the warden's state"
    stream = dashboard.stream
    assert stream is not None and stream.state == "running" and stream.pid == status.pid == os.getpid()
    assert stream.last_batch_id == status.last_batch_id == 7
    assert (stream.input_rows_per_second, stream.processed_rows_per_second, stream.batch_duration_ms,
            stream.trigger_interval_s) == (250.0, 240.0, 420, 1.0)
    assert stream.uptime_s is not None and 0 <= stream.uptime_s < 60
    by_name = {t.name: t for t in dashboard.tables}
    rows = summarize(settings, SESSION_ROWS)
    assert rows.head is not None
    assert (by_name[SESSION_ROWS].version, by_name[SESSION_ROWS].rows, by_name[SESSION_ROWS].files) == (
        rows.head.version, rows.rows, rows.files)
    assert by_name[SESSION_ROWS].small_files == by_name[SESSION_ROWS].files  # kilobytes: all small
    assert by_name[SESSION_ROWS].validation_passed is False and by_name[SESSION_ROWS].validation_classes == {"GAP": 1}
    assert by_name[SESSION_ROWS].last_validated_version == 1
    sites = dashboard.sites
    assert sites is not None and sites.interval_s == 3600 and sites.limit_s == 5400
    share = {s.site: (s.rows, s.quarantined, s.quarantine_share) for s in sites.sites}
    assert share["sites-b"] == (24, 6, 0.2)  # every fifth offset in quarantine (the sink helpers' rows)
    # the throughput series: records of both batches, from the Delta history's offset ranges
    assert sum(r for _, r in dashboard.series.throughput) * 60 == pytest.approx(120 + 50 + 30 + 30, abs=0.1)

    html = page.page(dashboard)
    assert 'data-figure="stream-state" class="ok">running<' in html
    assert 'data-figure="validation-session_rows" class="bad">FAILED GAP 1<' in html
    assert f'data-figure="table-session_rows-version">{rows.head.version}<' in html
    assert "http://" not in html and "https://" not in html, "no asset from elsewhere"
    metrics = prometheus.render(dashboard)
    assert 'streamwarden_stream_state{state="running"} 1' in metrics
    assert f'streamwarden_table_rows{{table="session_rows"}} {rows.rows}' in metrics
    assert 'streamwarden_validation_passed{table="session_rows"} 0' in metrics
    assert json.loads(json.dumps(dashboard.to_json()))["stream"]["pid"] == os.getpid()


def test_a_failed_stream_shows_its_class_and_the_alert_names_the_dag_with_its_params(settings: Settings) -> None:
    write_failure(settings.run_paths.failure, FailureDocument(FailureClass.DATA_LOSS, "offsets gone", 81, "sites-a", 0,
                                                         5, details={"available": [40, 90]}))
    verdict = assess(settings, WARDEN).verdict
    from streamwarden.warden.decision import recovery_action

    action = recovery_action(FailureClass.DATA_LOSS, verdict.failure)
    alert = Alert.from_verdict("critical", "stream failed", verdict.to_json(), action, source="stream_supervisor/1")
    dispatch(alert, [], settings.run_paths.alerts)
    dispatch(Alert("warning", "<b>not html</b>", {}, None, None, {}, RECOVERY[FailureClass.INTEGRITY]),
             [], settings.run_paths.alerts)

    dashboard = snapshot(sources(settings))

    assert dashboard.stream is not None and dashboard.stream.state == "failed"
    assert dashboard.stream.failure_class == "DATA_LOSS" and dashboard.stream.pid is None
    newest, first = dashboard.alerts
    assert first.actions[0] == DagAction("recover_stream", {
        "target": "offsets", "offsets": {"sites-a": {"0": 40}}, "dry_run": True,
        "reason": "DATA_LOSS at sites-a[0]: offsets gone"})
    assert newest.actions == [DagAction("stream_supervisor", {"force_restart": True}),
                              DagAction("recover_stream", {"target": "last_validated", "dry_run": True})]
    assert dashboard.tables and not dashboard.tables[0].exists and dashboard.errors == {}
    html = page.page(dashboard)
    assert 'data-figure="stream-state" class="bad">failed (DATA_LOSS)<' in html
    assert "&lt;b&gt;not html&lt;/b&gt;" in html and "<b>not html</b>" not in html
    assert 'href="../dags/recover_stream" target="_top"' in html
    assert 'streamwarden_stream_state{state="failed"} 1' in prometheus.render(dashboard)


def test_a_stopped_stream_without_a_failure(settings: Settings) -> None:
    beat(settings, 3)
    dashboard = snapshot(sources(settings))
    assert dashboard.stream is not None and dashboard.stream.state == "stopped"
    assert dashboard.stream.last_batch_id == 3 and dashboard.stream.uptime_s is None
    assert 'data-figure="stream-state" class="bad">stopped<' in page.fragment(dashboard)


@pytest.mark.parametrize(("text", "expected"), [
    ("then trigger stream_supervisor with force_restart=true and a reason",
     [DagAction("stream_supervisor", {"force_restart": True})]),
    ('trigger restart_sessions with Params {"sites": ["a"], "reason": "r"}',
     [DagAction("restart_sessions", {"sites": ["a"], "reason": "r"})]),
    ("run recover_stream to roll the table back, or trigger maintain_tables again",
     [DagAction("recover_stream", None), DagAction("maintain_tables", None)]),
    ("fix the producer", []),
    ("Trigger recover_stream with Params {broken", [DagAction("recover_stream", None)]),
])
def test_the_dags_and_params_an_alert_names(text: str, expected: list[DagAction]) -> None:
    assert dag_actions(text) == expected


def test_the_lag_history_is_bounded_and_read_back(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path, bootstrap_servers="127.0.0.1:1")
    verdict = assess(settings, load_warden_settings(broker_timeout=1)).verdict
    start = 1_000_000.0
    for at in (start, start + 60, start + KEEP_S + 30):
        append_lag_sample(settings, verdict, at)
    samples = read_lag_history(settings)
    assert [s.at for s in samples] == [start + 60, start + KEEP_S + 30]
    assert not any(s.lag_known for s in samples), "no broker: the samples say the lag was not measured"
    now = start + KEEP_S + 60
    assert series([], samples, now, hours=1).lag == [], "a check that could not measure the lag is no 0 on the chart"
    known = LagSample(now - 10, 42, None, None)
    assert series([], [*samples, known], now, hours=1, current_lag=50).lag == [(now - 10, 42.0), (now, 50.0)]


def test_a_stopped_stream_without_a_broker_shows_the_lag_unknown_and_its_last_measured_rate(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path, bootstrap_servers="127.0.0.1:1")
    tables(settings)
    time.sleep(0.2)  # the three commits apart in time
    run_batch(settings.root("output"), [SESSION_ROWS, QUARANTINE], {"sites-a": {0: (150, 190)}}, batch_id=2)
    write_heartbeat(settings.run_paths.heartbeat, Heartbeat("started", "q", "r", os.getpid(),
                                                       trigger_interval_s=1.0))  # a start that died at once
    dashboard = snapshot(Sources(settings, load_warden_settings(broker_timeout=1), load_restart_settings(),
                                 load_maintenance_settings()))

    stream = dashboard.stream
    assert stream is not None and stream.state == "stopped" and stream.broker_error
    assert (stream.lag_status, stream.total_lag, stream.max_lag) == ("UNKNOWN", None, None)
    html = page.fragment(dashboard)
    assert 'data-figure="lag-total">unknown<' in html and "lag not measured: the broker could not be asked" in html
    assert "ERR" not in html and 'data-figure="lag-total">0<' not in html
    metrics = prometheus.render(dashboard)
    assert "\nstreamwarden_lag_total_records " not in metrics and "\nstreamwarden_lag_measured 0\n" in metrics
    rate = dashboard.series.last_rate
    assert rate is not None and rate.commits == 3 and rate.records_per_second > 0
    assert f'data-figure="stream-last-rate">{rate.records_per_second:,.0f}<' in html
    assert "over 3 stream commits until" in html
    assert f"streamwarden_last_measured_records_per_second {rate.records_per_second:g}" in metrics
    assert json.loads(json.dumps(dashboard.to_json()))["stream"]["total_lag"] is None


def test_a_stopped_streams_lag_is_measured_against_its_checkpoint(settings: Settings,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from fixtures.stream_process import produce_raw
    from streamwarden.kafka.admin import create_topics

    topic = f"{settings.topic_pattern.removesuffix('-.*')}-s0"
    create_topics({"bootstrap.servers": settings.bootstrap_servers}, [topic], partitions=1)
    (end,) = produce_raw(settings.bootstrap_servers, [topic], 120)[topic].values()
    checkpoint = settings.checkpoint_location
    for folder in ("offsets", "commits"):
        (checkpoint / folder).mkdir(parents=True)
    (checkpoint / "offsets" / "0").write_text(f'v1\n{{}}\n{json.dumps({topic: {"0": 20}})}\n')
    (checkpoint / "commits" / "0").write_text("v1\n{}\n")

    dashboard = snapshot(sources(settings))

    assert dashboard.stream is not None and dashboard.stream.state == "stopped"
    assert dashboard.stream.total_lag == end - 20 and dashboard.stream.broker_error is None
    html = page.fragment(dashboard)
    assert f'data-figure="lag-total">{end - 20:,}<' in html and f'data-figure="lag-{topic}-0">{end - 20:,}<' in html

    monkeypatch.setenv(CHAOS_RAISE_ENV, "watermarks_fetch:ENVIRONMENT")  # the fetch-based query fails
    listed = snapshot(sources(settings))
    assert listed.stream is not None and listed.stream.lag_lower_bound and listed.stream.total_lag is not None
    html = page.fragment(listed)
    assert f'data-figure="lag-total">at least {listed.stream.total_lag:,}<' in html and "high (at least)" in html
    assert "broker: high watermarks from ListOffsets (lags are lower bounds)" in html
    assert "streamwarden_lag_lower_bound 1" in prometheus.render(listed)


def test_the_last_measured_rate_is_the_newest_run_of_stream_commits() -> None:
    def commit(at: float, records: int) -> dict[str, object]:
        return {"timestamp": int(at * 1000), "streamwarden.ranges": json.dumps({"t": {"0": [0, records]}})}

    history = [commit(1000, 500), {"timestamp": 1_001_000, "operation": "OPTIMIZE"}, commit(1003, 600),
               commit(1006, 900), commit(5000, 7)]  # the last: a start that died after one batch
    rate = history_rate(list(reversed(history)))  # delta-rs gives the newest first
    assert rate is not None and (rate.records_per_second, rate.commits, rate.since, rate.until) == (
        250.0, 3, 1000.0, 1006.0)
    assert rate.describe().startswith("250 records/s over 3 stream commits until 1970-01-01 00:16:46 UTC")
    assert history_rate([commit(1000, 5)]) is None and history_rate([]) is None
    many = [commit(2000 + 3 * i, 30) for i in range(50)]
    assert history_rate(many) == MeasuredRate(10.0, RATE_COMMITS, 2000 + 3 * 30, 2000 + 3 * 49)


def test_throughput_buckets_the_stream_commits_only() -> None:
    ranges = json.dumps({"t": {"0": [0, 600], "1": [10, 70]}})
    history = [{"timestamp": 120_000, "streamwarden.ranges": ranges}, {"timestamp": 150_000, "operation": "OPTIMIZE"},
               {"timestamp": 130_000, "customMetadata": {"streamwarden.ranges": ranges}}]
    assert throughput(history, now=200.0, hours=1) == [(120.0, 22.0)]


def test_data_docs_are_served_from_their_folder_only(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path)
    site = settings.run_paths.data_docs
    site.mkdir(parents=True)
    (site / "index.html").write_text("<html></html>")
    (settings.root("run") / "secret.json").write_text("{}")
    assert data_docs_file(settings, "index.html") == (site / "index.html").resolve()
    assert data_docs_file(settings, "../secret.json") is None and data_docs_file(settings, "nope.html") is None
    assert data_docs_file(settings, "index.html\x00.png") is None and data_docs_file(settings, "x" * 5000) is None


def test_the_source_keeps_a_snapshot_for_its_ttl(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path, bootstrap_servers="127.0.0.1:1")
    loads: list[float] = []

    def load() -> Sources:
        loads.append(time.time())
        return Sources(settings, load_warden_settings(broker_timeout=1), load_restart_settings(),
                       load_maintenance_settings())

    source = DashboardSource(load, ttl=60)
    first: Dashboard = source.get()
    assert source.get() is first and len(loads) == 1
    assert first.stream is not None and first.stream.broker_error  # reported, not raised


def test_heavy_reads_wait_for_a_new_version_and_their_ttl() -> None:
    from streamwarden.dashboard.snapshot import _Memo

    memo, reads = _Memo(heavy_ttl=30), []

    def read(value: int) -> int:
        reads.append(value)
        return value

    assert memo.get("t", 1, 100.0, lambda: read(1)) == 1
    assert memo.get("t", 2, 110.0, lambda: read(2)) == 1, "a new version within the ttl: kept"
    assert memo.get("t", 2, 131.0, lambda: read(2)) == 2
    assert memo.get("t", 2, 500.0, lambda: read(3)) == 2, "the same version: kept however old"
    assert reads == [1, 2]


def test_sites_show_exposure_against_the_limit_and_their_quarantine_share(tmp_path: Path) -> None:
    from deltalake import write_deltalake

    from fixtures.site_tables import DEAD, ROWS, minutes_ago
    from streamwarden.tables.location import TableLocation

    settings = load_settings(home=tmp_path, bootstrap_servers="127.0.0.1:1", session_timeout="300m")
    for name, rows in ((SESSION_ROWS, ROWS), (QUARANTINE, DEAD)):
        write_deltalake(TableLocation.of(settings, name).uri, rows.to_table(), partition_by=["topic"])
    warden = load_warden_settings(broker_timeout=1)
    dashboard = snapshot(Sources(settings, warden, load_restart_settings(schedule="@hourly"),
                                 load_maintenance_settings()))

    assert dashboard.sites is not None and dashboard.errors == {}
    by_site = {s.site: s for s in dashboard.sites.sites}
    old = by_site["sites-0"]  # its newest clean start: the "healed" session's resync 30 minutes before ROWS' time
    assert old.newest_clean_start == minutes_ago(30).isoformat()
    exposure = (datetime.now(UTC) - minutes_ago(30)).total_seconds()
    assert old.exposure_s is not None and abs(old.exposure_s - exposure) < 60
    assert old.over_limit == (exposure > 5400)
    assert (old.rows, old.quarantined, old.quarantine_share) == (6, 2, 0.25)
    assert 'data-figure="exposure-sites-0">' in page.fragment(dashboard)
    assert 'streamwarden_site_exposure_limit_seconds 5400' in prometheus.render(dashboard)
