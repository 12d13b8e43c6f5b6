"""Check 3 against the real broker (Tansu): log start and end, expired offsets, lag, staleness.

The tables are committed by the real DeltaSink for the offsets the broker acknowledged; the checkpoint says
how far the stream has read.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from fixtures.stream_output import commit_batch, settings_for, write_checkpoint
from fixtures.stream_process import produce_raw
from streamwarden.local.broker import LocalBroker
from streamwarden.settings import Settings
from streamwarden.tables.ranges import OffsetRanges
from streamwarden.validation.findings import FindingClass
from streamwarden.validation.settings import ValidationSettings
from streamwarden.validation.steps import validate

ONLINE = ValidationSettings(broker_timeout=10.0)
WEEK = 7 * 24 * 3600.0  # the retention the topic factory creates topics with


class Produced:
    def __init__(self, settings: Settings, topic: str, ends: dict[int, int]) -> None:
        self.settings, self.topic, self.ends = settings, topic, ends

    def ranges(self, end: Callable[[int, int], int], start: Callable[[int, int], int] = lambda p, e: 0
               ) -> OffsetRanges:
        return {self.topic: {p: (start(p, e), end(p, e)) for p, e in sorted(self.ends.items())}}


@pytest.fixture()
def produced(tmp_path: Path, broker: LocalBroker, topic_factory: Callable[..., list[str]]) -> Produced:
    (topic,) = topic_factory(1, partitions=2)
    ends = produce_raw(broker.bootstrap_servers, [topic], 400)[topic]
    assert set(ends) == {0, 1} and all(e > 100 for e in ends.values())
    return Produced(settings_for(tmp_path, bootstrap_servers=broker.bootstrap_servers, topic_pattern=topic),
                    topic, ends)


def test_tables_holding_everything_kafka_holds_pass(produced: Produced) -> None:
    everything = produced.ranges(lambda p, e: e)
    commit_batch(produced.settings, everything, 0)
    write_checkpoint(produced.settings, [everything])
    report = validate(produced.settings, ONLINE)
    assert report.passed and report.notes == (), report.text()
    assert {(u.partition, u.log_start, u.log_end, u.position, u.lag, u.expired) for u in report.upstream} == {
        (p, 0, e, e, 0, 0) for p, e in produced.ends.items()}
    assert all(u.retention_s == WEEK and u.expires_in_s is None for u in report.upstream)
    assert f"{produced.ends[0]:,}" in report.text()
    assert {(h.partition, h.first, h.end, h.kafka, h.tables) for h in report.hours} == {  # produced this hour
        (p, 0, e, e, e) for p, e in produced.ends.items()}
    assert "audit: 2 topic-partition hours compared with Kafka, 0 differ" in report.text()


def test_offsets_skipped_without_a_claim_are_an_audit_mismatch(produced: Produced) -> None:
    first = produced.ranges(lambda p, e: 50)
    after_restart = produced.ranges(lambda p, e: e, start=lambda p, e: 80)  # e.g. restarted at explicit offsets
    commit_batch(produced.settings, first, 0)
    commit_batch(produced.settings, after_restart, 0)
    write_checkpoint(produced.settings, [after_restart])
    report = validate(produced.settings, ONLINE)
    mismatches = [f for f in report.findings if f.finding_class is FindingClass.AUDIT_MISMATCH]
    assert {(f.partition, f.ranges, f.count) for f in mismatches} == {
        (p, ((0, e),), 30) for p, e in produced.ends.items()}
    assert len(report.findings) == 2, report.text()  # check 1 sees nothing: the logs claim what the tables hold
    assert all("Kafka still holds them (its log starts at 0)" in f.detail for f in mismatches)


def test_unread_offsets_are_lag_and_turn_stale_without_commits(produced: Produced) -> None:
    half = produced.ranges(lambda p, e: e // 2)
    commit_batch(produced.settings, half, 0)
    write_checkpoint(produced.settings, [half])
    report = validate(produced.settings, ONLINE)
    assert report.passed, report.text()
    for u in report.upstream:
        end = produced.ends[u.partition]
        assert (u.position, u.lag, u.expired) == (end // 2, end - end // 2, 0)
        assert u.oldest_unread_age_s is not None and 0 <= u.oldest_unread_age_s < 300
        assert u.expires_in_s is not None and WEEK - 300 < u.expires_in_s <= WEEK
        assert u.rate_per_s is not None and u.rate_per_s > 0  # the tables advanced since their creation
    time.sleep(0.05)
    stale = validate(produced.settings, ValidationSettings(broker_timeout=10.0, stale_after=0.01))
    findings = [f for f in stale.findings if f.finding_class is FindingClass.STALE]
    assert {(f.partition, f.ranges, f.count) for f in findings} == {
        (p, ((e // 2, e),), e - e // 2) for p, e in produced.ends.items()}
    assert all("no table commit" in f.detail and f.table is None for f in findings)


def test_a_log_that_ends_below_the_tables_is_data_expired(produced: Produced) -> None:
    beyond = produced.ranges(lambda p, e: e + 50 if p == 0 else e)  # e.g. the topic was recreated since
    commit_batch(produced.settings, beyond, 0)
    write_checkpoint(produced.settings, [beyond])
    report = validate(produced.settings, ONLINE)
    (expired,) = [f for f in report.findings if f.finding_class is FindingClass.DATA_EXPIRED]
    end = produced.ends[0]
    assert (expired.topic, expired.partition, expired.ranges, expired.count) == (produced.topic, 0,
                                                                                 ((end, end + 50),), 50)
    assert "recreated or truncated" in expired.detail and "retention.ms" in expired.next_action


def test_offsets_deleted_before_they_were_read_are_data_expired(produced: Produced) -> None:
    read = produced.ranges(lambda p, e: 20)
    commit_batch(produced.settings, read, 0)
    write_checkpoint(produced.settings, [read])
    admin = AdminClient({"bootstrap.servers": produced.settings.bootstrap_servers})
    try:
        for future in admin.delete_records([TopicPartition(produced.topic, 0, 60)], request_timeout=10).values():
            future.result(10)
    except KafkaException as exc:  # the broker may not implement DeleteRecords
        pytest.skip(f"the broker cannot delete records: {exc}")
    report = validate(produced.settings, ONLINE)
    (expired,) = [f for f in report.findings if f.finding_class is FindingClass.DATA_EXPIRED]
    assert (expired.partition, expired.ranges, expired.count) == (0, ((20, 60),), 40)
    assert "expired before they were read" in expired.detail


def test_an_unreachable_broker_skips_the_check_with_a_note(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, bootstrap_servers="127.0.0.1:9")
    ranges: OffsetRanges = {"sites-a": {0: (0, 10)}}
    commit_batch(settings, ranges, 0)
    write_checkpoint(settings, [ranges])
    report = validate(settings, ValidationSettings(broker_timeout=1.0))
    assert report.passed and report.upstream == ()
    assert any("the broker could not be asked, checks 3 and 4 skipped" in n for n in report.notes), report.notes


def test_unread_data_expiring_before_the_stream_reaches_it_is_stale() -> None:
    from streamwarden.validation.upstream import PartitionUpstream, _findings

    def row(rate: float | None, expires_in: float) -> PartitionUpstream:
        return PartitionUpstream("t", 0, 0, 10_000, 4_000, 0, 6_000, WEEK, WEEK - expires_in, rate, expires_in)

    now = time.time()
    assert _findings(row(100.0, 3600), [4_000], now - 5, now, 900) == []  # 60 s to catch up, an hour left
    (slow,) = _findings(row(1.0, 3600), [4_000], now - 5, now, 900)  # 6,000 s to catch up
    assert (slow.finding_class, slow.ranges, slow.count) == (FindingClass.STALE, ((4_000, 10_000),), 6_000)
    assert "expires in 3,600 s" in slow.detail and "1.0 offsets/s needs 6,000 s" in slow.detail
    assert _findings(row(None, 3600), [4_000], now - 5, now, 900) == []  # quiet, recent commit, an hour left
    (stuck,) = _findings(row(None, 600), [4_000], now - 5, now, 900)  # expires within STALE_AFTER
    assert "no progress" in stuck.detail


def test_missing_offsets_are_told_whether_kafka_still_holds_them() -> None:
    from streamwarden.validation.findings import Finding
    from streamwarden.validation.upstream import PartitionUpstream, annotate

    kafka = [PartitionUpstream("t", 0, 100, 500, 500, 0, 0, WEEK, None, None, None)]
    gap = Finding(FindingClass.GAP, "session_rows", "t", 0, ((150, 160),), 10, "claimed")
    lost = Finding(FindingClass.CHECKPOINT_MISMATCH, "quarantine", "t", 0, ((40, 60),), 20, "behind")
    stale = Finding(FindingClass.STALE, None, "t", 0, ((400, 500),), 100, "slow")
    other = Finding(FindingClass.GAP, "session_rows", "u", 0, ((1, 2),), 1, "elsewhere")
    told = annotate([gap, lost, stale, other], kafka)
    assert told[0].detail == "claimed; Kafka still holds them (its log starts at 100): they can be read again"
    assert told[1].detail == "behind; Kafka's log starts at 100: offsets below it are gone from Kafka too"
    assert told[2:] == [stale, other]


def test_a_position_below_the_log_start_is_data_expired() -> None:
    from streamwarden.validation.upstream import PartitionUpstream, _findings

    row = PartitionUpstream("t", 1, 300, 900, 120, 180, 600, WEEK, 60.0, 10.0, WEEK - 60)
    (expired,) = _findings(row, [120], time.time(), time.time(), 900)
    assert (expired.finding_class, expired.table, expired.partition, expired.ranges, expired.count) == (
        FindingClass.DATA_EXPIRED, None, 1, ((120, 300),), 180)
    assert "180 offsets expired before they were read" in expired.detail
