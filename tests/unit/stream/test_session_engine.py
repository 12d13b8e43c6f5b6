"""The integrity tiers and the handler contract, on the pure engine (no Spark)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import asdict
from datetime import timedelta
from typing import Any

import pytest

from fixtures.sessions import (
    ALL_TRAFFIC,
    DAMAGED_INDEX,
    DAMAGED_SESSIONS,
    MALFORMED,
    MAX_MESSAGE_BYTES,
    RESYNC_DEAD,
    RESYNC_TABLES,
    SCHEMA,
    T0,
    Message,
    good,
    replay,
    snapshot,
    update,
)
from streamwarden.failures import ConfigError, IntegrityError, MalformedDataError
from streamwarden.runfiles.handler_pin import (
    HANDLER_FILE,
    SLOT_CODEC,
    SLOT_EXPIRY,
    check_pinned,
    fingerprint,
    layout_buckets,
    layout_codec,
    layout_expiry,
    layout_partitions,
    pin_handler,
)
from streamwarden.session_handler import load_handler
from streamwarden.stream.sessions.engine import DeadReason, RawRecord, SessionMeta, SessionPolicy, process_session
from streamwarden.stream.sessions.session_store import SlotCodec
from streamwarden.stream.sessions.table_handler import TableReconstruction
from streamwarden.wire import EndEvent, Row, SnapshotEvent, encode

HANDLER = TableReconstruction()


def run(messages: Iterable[Message], policy: SessionPolicy) -> tuple[dict[str, Any], dict[str, list[str]], int]:
    """Feed messages session by session (as Spark groups them); returns tables, dead classes, row count."""
    by_key: dict[bytes | None, list[RawRecord]] = {}
    for offset, message in enumerate(messages):
        by_key.setdefault(message.key, []).append(RawRecord("t", 0, offset, message.key, message.value, T0))
    tables: dict[str, Any] = {}
    dead: dict[str, list[str]] = {}
    rows = 0
    for records in by_key.values():
        result = process_session(SessionMeta(), HANDLER.initial_state(), records, handler=HANDLER, schema=SCHEMA,
                                 policy=policy)
        if result.applied and not result.released:
            tables[result.applied[-1].event.session_id] = result.state
        for letter in result.dead:
            dead.setdefault((letter.record.key or b"").decode(), []).append(letter.error_class)
        rows += len({a.record.offset for a in result.applied}) + len(result.dead)
    return tables, dead, rows


def test_tier_none_applies_everything_that_decodes() -> None:
    tables, dead, accounted = run(ALL_TRAFFIC, SessionPolicy(tier="none", max_message_bytes=MAX_MESSAGE_BYTES))
    assert tables == replay(ALL_TRAFFIC)
    assert sorted(c for classes in dead.values() for c in classes) == sorted(m.malformed for m in MALFORMED)
    assert accounted == len(ALL_TRAFFIC), "every offset is a row or a dead letter"


def test_strict_resync_skips_exactly_the_damaged_interval() -> None:
    policy = SessionPolicy(tier="strict", on_gap="resync", max_message_bytes=MAX_MESSAGE_BYTES)
    tables, dead, accounted = run(ALL_TRAFFIC, policy)
    assert tables == RESYNC_TABLES
    assert {k: v for k, v in dead.items() if k in RESYNC_DEAD} == RESYNC_DEAD
    assert accounted == len(ALL_TRAFFIC)


@pytest.mark.parametrize("session", sorted(DAMAGED_SESSIONS))
def test_strict_fail_names_session_expected_and_seen(session: str) -> None:
    from fixtures.sessions import DUPLICATE, EARLY, GAP

    traffic = {"B": GAP, "C": DUPLICATE, "D": EARLY}[session]
    reason, expected, seen = DAMAGED_SESSIONS[session]
    with pytest.raises(IntegrityError) as error:
        run(traffic, SessionPolicy(tier="strict"))
    assert error.value.details == {"session_id": session, "reason": reason, "expected_seq": expected,
                                   "seen_seq": seen}
    assert error.value.topic == "t" and error.value.partition == 0
    assert error.value.offset == DAMAGED_INDEX[session]


def test_malformed_policy_fail_stops_with_the_offset() -> None:
    with pytest.raises(MalformedDataError) as error:
        run(MALFORMED[:1], SessionPolicy(malformed="fail"))
    assert (error.value.topic, error.value.partition, error.value.offset) == ("t", 0, 0)
    assert error.value.details == {"kind": "invalid_json"}


def test_session_in_two_partitions_is_integrity_in_strict_only() -> None:
    records = [RawRecord("t", p, o, b"S", encode(e), T0) for p, o, e in
               [(0, 0, snapshot("S", 0, {"r": {"qty": 1}})), (1, 0, update("S", 1, "r", qty=2))]]
    with pytest.raises(IntegrityError, match="two topic-partitions"):
        process_session(SessionMeta(), {}, records, handler=HANDLER, schema=SCHEMA, policy=SessionPolicy())
    result = process_session(SessionMeta(), {}, records, handler=HANDLER, schema=SCHEMA,
                             policy=SessionPolicy(tier="fuzzy"))
    assert result.state == {"r": {"qty": 2}}


def test_fuzzy_sends_events_behind_the_session_watermark_to_the_dead_letter() -> None:
    events = [snapshot("F", 0, {"r": {"qty": 1}}), update("F", 1, "r", minutes=30, qty=2),
              update("F", 2, "r", minutes=10, qty=3), update("F", 3, "r", minutes=28, qty=4)]
    records = [RawRecord("t", 0, i, b"F", encode(e), T0) for i, e in enumerate(events)]
    policy = SessionPolicy(tier="fuzzy", lateness_s=timedelta(minutes=5).total_seconds())
    result = process_session(SessionMeta(), {}, records, handler=HANDLER, schema=SCHEMA, policy=policy)
    assert [d.error_class for d in result.dead] == ["LATE_EVENT"] and result.dead[0].record.offset == 2
    assert result.state == {"r": {"qty": 4}}


def test_the_fuzzy_watermark_is_stored_with_the_meta_and_holds_across_a_batch_boundary() -> None:
    events = [snapshot("F", 0, {"r": {"qty": 1}}), update("F", 1, "r", minutes=30, qty=2),
              update("F", 2, "r", minutes=10, qty=3), update("F", 3, "r", minutes=28, qty=4)]
    records = [RawRecord("t", 0, i, b"F", encode(e), T0) for i, e in enumerate(events)]
    policy = SessionPolicy(tier="fuzzy", lateness_s=timedelta(minutes=5).total_seconds())
    first = process_session(SessionMeta(), {}, records[:2], handler=HANDLER, schema=SCHEMA, policy=policy)
    assert first.meta.max_event_time == (T0 + timedelta(minutes=30)).isoformat()
    second = process_session(SessionMeta.from_json(first.meta.to_json()), first.state, records[2:],
                             handler=HANDLER, schema=SCHEMA, policy=policy)
    assert [d.record.offset for d in second.dead] == [2] and second.state == {"r": {"qty": 4}}
    assert second.meta.max_event_time == first.meta.max_event_time  # minute 28 is behind minute 30


def test_state_survives_a_batch_boundary_without_false_gaps() -> None:
    from fixtures.sessions import CLEAN

    records = [RawRecord("t", 0, i, m.key, m.value, T0) for i, m in enumerate(CLEAN)]
    first = process_session(SessionMeta(), {}, records[:2], handler=HANDLER, schema=SCHEMA, policy=SessionPolicy())
    meta = SessionMeta.from_json(first.meta.to_json())
    state = HANDLER.decode_state(HANDLER.encode_state(first.state))
    second = process_session(meta, state, records[2:], handler=HANDLER, schema=SCHEMA, policy=SessionPolicy())
    assert not second.dead and second.state == replay(CLEAN)["A"]


def test_session_meta_reads_what_earlier_releases_stored_and_round_trips() -> None:
    """Checkpoints hold metas written as ``json.dumps(asdict(meta), sort_keys=True)``: they read back the same."""
    meta = SessionMeta(7, "sites-1", 3, "2026-11-25T10:00:00+00:00",
                       {"offset": 41, "seq": 9, "expected_seq": 7, "reason": DeadReason.SEQUENCE_GAP})
    earlier = json.dumps(asdict(meta), sort_keys=True)
    assert SessionMeta.from_json(earlier) == meta == SessionMeta.from_json(meta.to_json())
    assert json.loads(meta.to_json()) == json.loads(earlier) and list(json.loads(meta.to_json())) == sorted(
        json.loads(earlier))
    assert SessionMeta.from_json(SessionMeta().to_json()) == SessionMeta()


def test_the_built_in_handler_keeps_its_fingerprint_across_module_moves() -> None:
    # c0ab9bb64f31c91c was pinned by checkpoints written while the handler lived in streamwarden.sessions
    assert fingerprint(TableReconstruction(), 64)["fingerprint"] == "c0ab9bb64f31c91c"


def test_handler_fingerprint_is_pinned_with_the_checkpoint(tmp_path: Any) -> None:
    pinned = pin_handler(tmp_path, HANDLER, 64)
    assert pinned == fingerprint(HANDLER, 64) == pin_handler(tmp_path, HANDLER, 64)

    class TableReconstructionV2(TableReconstruction):
        state_version = 2

    with pytest.raises(ConfigError, match="refusing to start"):
        pin_handler(tmp_path, TableReconstructionV2(), 64)
    with pytest.raises(ConfigError, match=r"session_buckets 64,.* session_buckets 8,"):
        pin_handler(tmp_path, HANDLER, 8)


def test_the_pinned_layout_is_checked_before_spark_writing_nothing(tmp_path: Any) -> None:
    check_pinned(tmp_path, HANDLER, None, 64)  # a new checkpoint: nothing to refuse, and nothing pinned yet
    assert not (tmp_path / HANDLER_FILE).exists()
    pin_handler(tmp_path, HANDLER, 64, 16, 2)
    check_pinned(tmp_path, HANDLER, None, 8, slots=32, partitions=4)  # unset buckets, other slots: the pinned
    check_pinned(tmp_path, HANDLER, 64, 8)

    class TableReconstructionV2(TableReconstruction):
        state_version = 2

    with pytest.raises(ConfigError, match="refusing to start"):
        check_pinned(tmp_path, TableReconstructionV2(), None, 64)
    with pytest.raises(ConfigError, match=r"session_buckets 64,.* session_buckets 8,"):
        check_pinned(tmp_path, HANDLER, 8, 64)


def test_a_checkpoint_keeps_the_session_slots_it_started_with(tmp_path: Any) -> None:
    new, legacy = tmp_path / "new", tmp_path / "legacy"
    new.mkdir(), legacy.mkdir()
    pinned = pin_handler(new, HANDLER, 64, 16)
    assert pinned["session_slots"] == 16 and pinned["fingerprint"] != fingerprint(HANDLER, 64)["fingerprint"]
    assert pin_handler(new, HANDLER, 64, 32) == pinned  # configured otherwise later: the checkpoint's own layout
    pin_handler(legacy, HANDLER, 64, 0)  # as every checkpoint before slots: one entry per session
    assert "session_slots" not in pin_handler(legacy, HANDLER, 64, 16)
    assert json.loads((legacy / HANDLER_FILE).read_text())["fingerprint"] == "c0ab9bb64f31c91c"


def test_a_new_checkpoint_compresses_its_slots_and_one_from_before_keeps_them_plain(tmp_path: Any) -> None:
    new, legacy, entries = tmp_path / "new", tmp_path / "legacy", tmp_path / "entries"
    for folder in (new, legacy, entries):
        folder.mkdir()
    pinned = pin_handler(new, HANDLER, 64, 16)
    assert pinned["slot_codec"] == SLOT_CODEC == "zstd" and layout_codec(pinned, 16) == "zstd"
    # slots pinned before the codec: plain, also when started again by this release
    (legacy / HANDLER_FILE).write_text(json.dumps(fingerprint(HANDLER, 64, 16)))
    assert "slot_codec" not in pin_handler(legacy, HANDLER, 64, 16)
    assert layout_codec(json.loads((legacy / HANDLER_FILE).read_text()), 16) == ""
    assert "slot_codec" not in pin_handler(entries, HANDLER, 64, 0)  # one entry per session: nothing to compress


def test_a_new_checkpoint_s_slots_expire_by_the_store_alone_and_one_from_before_keeps_spark_s_ttl(
        tmp_path: Any, caplog: pytest.LogCaptureFixture) -> None:
    new, legacy, entries = tmp_path / "new", tmp_path / "legacy", tmp_path / "entries"
    for folder in (new, legacy, entries):
        folder.mkdir()
    pinned = pin_handler(new, HANDLER, 64, 16)
    assert pinned["slot_expiry"] == SLOT_EXPIRY == "store" and layout_expiry(pinned, 16) == "store"
    assert pin_handler(new, HANDLER, 64, 16) == pinned  # started again: the same layout, no refusal
    (legacy / HANDLER_FILE).write_text(json.dumps(fingerprint(HANDLER, 64, 16, codec=SLOT_CODEC)))
    with caplog.at_level(logging.WARNING, logger="streamwarden.stream.sessions"):
        assert "slot_expiry" not in pin_handler(legacy, HANDLER, 64, 16)
    assert "expire through Spark's TTL" in caplog.text and "recover onto a new checkpoint" in caplog.text
    assert layout_expiry(json.loads((legacy / HANDLER_FILE).read_text()), 16) == ""
    assert "slot_expiry" not in pin_handler(entries, HANDLER, 64, 0)  # one entry per session: Spark's TTL


def test_a_compressed_slot_reads_back_what_was_written_in_a_fraction_of_the_bytes() -> None:
    slot = {f"site-{i:05d}": (SessionMeta(next_seq=i, topic="t", partition=1).to_json(),
                              TableReconstruction().encode_state({f"r{j}": {"price": j * 1.5, "status": "open"}
                                                                  for j in range(10)}), 1_764_000_000_000 + i)
            for i in range(200)}
    plain, zstd = SlotCodec(""), SlotCodec(SLOT_CODEC)
    assert plain.decode(plain.encode(slot)) == slot == zstd.decode(zstd.encode(slot))
    assert len(zstd.encode(slot)) < len(plain.encode(slot)) / 3


def test_a_checkpoint_keeps_the_partitions_its_bucket_labels_were_balanced_for(tmp_path: Any) -> None:
    new, legacy = tmp_path / "new", tmp_path / "legacy"
    new.mkdir(), legacy.mkdir()
    pinned = pin_handler(new, HANDLER, 16, 64, 2)
    assert pinned["bucket_partitions"] == 2 and layout_partitions(pinned, 8) == 2
    assert pin_handler(new, HANDLER, 16, 64, 8) == pinned  # a later start on more cores: the same labels
    pin_handler(legacy, HANDLER, 64, 0, 0)  # as every checkpoint before labels: the bucket numbers
    assert "bucket_partitions" not in pin_handler(legacy, HANDLER, 64, 0, 2)
    assert json.loads((legacy / HANDLER_FILE).read_text())["fingerprint"] == "c0ab9bb64f31c91c"
    assert layout_partitions(None, 2) == 2  # a new checkpoint: the settings' partitions


def test_an_unset_bucket_count_takes_the_checkpoints_own(tmp_path: Any) -> None:
    assert layout_buckets(None, None, 16) == 16  # a new checkpoint: the settings' default
    pinned = pin_handler(tmp_path, HANDLER, 64)  # a checkpoint started with 64 (the default before 2026-11-25)
    assert layout_buckets(pinned, None, 16) == 64
    assert pin_handler(tmp_path, HANDLER, layout_buckets(pinned, None, 16)) == pinned
    assert layout_buckets(pinned, 8, 16) == 8  # set: taken as set, and refused by pin_handler (above)


@pytest.mark.parametrize(("path", "says"), [
    ("no.such.module:Handler", "cannot be loaded"),
    ("streamwarden.wire:TableSchema", "lacks"),
])
def test_bad_handler_path_is_a_config_error(path: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        load_handler(path)


def _process(events: list[Any], policy: SessionPolicy, meta: SessionMeta | None = None) -> Any:
    records = [RawRecord("t", 0, offset, m.key, m.value, T0) for offset, m in enumerate(good(e) for e in events)]
    return process_session(meta or SessionMeta(), HANDLER.initial_state(), records, handler=HANDLER, schema=SCHEMA,
                           policy=policy)


def test_session_boundaries_are_marked_on_the_rows_of_their_events() -> None:
    events = [snapshot("S", 0, {"r1": {"qty": 1}, "r2": {"qty": 2}}), update("S", 1, "r1", qty=3),
              snapshot("S", 2, {"r1": {"qty": 4}}), EndEvent("S", 3, T0),
              SnapshotEvent("S", 0, T0, (Row("r9", {"qty": 9}),), restart_request="restart-1")]
    result = _process(events, SessionPolicy(tier="strict", max_message_bytes=MAX_MESSAGE_BYTES))
    marked = [(a.record.offset, row["op"], a.boundary and a.boundary.value, a.restart_request)
              for a in result.applied for row in a.rows]
    assert marked == [(0, "snapshot", "start", None), (0, "snapshot", "start", None), (1, "upsert", None, None),
                      (2, "snapshot", "snapshot", None), (3, "end", "end", None),
                      (4, "snapshot", "start", "restart-1")]
    assert not result.dead and not result.released and result.rows == len(marked)


def test_a_new_snapshot_heals_a_resync_session_as_resync_and_an_end_in_resync_releases_the_state() -> None:
    policy = SessionPolicy(tier="strict", on_gap="resync", max_message_bytes=MAX_MESSAGE_BYTES)
    gap = [snapshot("G", 0, {"r1": {"qty": 1}}), update("G", 2, "r1", qty=2)]
    healed = _process([*gap, snapshot("G", 3, {"r1": {"qty": 5}})], policy)
    assert [d.error_class for d in healed.dead] == ["SEQUENCE_GAP"]
    assert [(r.record.offset, r.boundary and r.boundary.value) for r in healed.applied] == [(0, "start"), (2, "resync")]
    assert healed.state == {"r1": {"qty": 5}} and healed.meta.resync_since is None
    ended = _process([*gap, update("G", 3, "r1", qty=3), EndEvent("G", 4, T0)], policy)
    assert [d.error_class for d in ended.dead] == ["SEQUENCE_GAP", "RESYNC_SKIPPED", "RESYNC_SKIPPED"]
    assert ended.released and ended.meta == SessionMeta() and ended.state == HANDLER.initial_state()
