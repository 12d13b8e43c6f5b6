"""Hand-made session traffic with known damage, shared by the engine and end-to-end session tests."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from streamwarden.wire import (
    DEMO_SCHEMA,
    DeleteEvent,
    EndEvent,
    Row,
    SessionEvent,
    SnapshotEvent,
    Table,
    UpdateEvent,
    apply_event,
    encode,
)

T0 = datetime(2026, 11, 21, 8, 0, tzinfo=UTC)
SCHEMA = DEMO_SCHEMA


def snapshot(session: str, seq: int, rows: dict[str, dict[str, object]], minutes: int = 0) -> SnapshotEvent:
    return SnapshotEvent(session, seq, T0 + timedelta(minutes=minutes),
                         tuple(Row(r, v) for r, v in rows.items()))  # type: ignore[arg-type]


def update(session: str, seq: int, row: str, minutes: int = 0, **values: object) -> UpdateEvent:
    return UpdateEvent(session, seq, T0 + timedelta(minutes=minutes), row, values)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Message:
    """One Kafka message: key and value bytes, and the event it encodes (None when malformed)."""

    key: bytes | None
    value: bytes | None
    event: SessionEvent | None = None
    malformed: str | None = None  # the expected error class


def good(event: SessionEvent) -> Message:
    return Message(event.session_id.encode(), encode(event), event)


CLEAN = [good(snapshot("A", 0, {"r1": {"price": 1.0, "qty": 1}, "r2": {"status": "open"}})),
         good(update("A", 1, "r1", qty=5)), good(update("A", 2, "r3", venue="X", active=True)),
         good(DeleteEvent("A", 3, T0, "r2"))]
GAP = [good(snapshot("B", 0, {"r1": {"qty": 1}})), good(update("B", 1, "r1", qty=2)),
       good(update("B", 3, "r1", qty=4)), good(update("B", 4, "r1", qty=5)),
       good(snapshot("B", 5, {"r9": {"qty": 9}})), good(update("B", 6, "r9", price=9.5))]
DUPLICATE = [good(snapshot("C", 0, {"r1": {"qty": 1}})), good(update("C", 1, "r1", qty=2)),
             good(update("C", 1, "r1", qty=2)), good(update("C", 2, "r1", qty=3)),
             good(snapshot("C", 3, {"r1": {"qty": 30}}))]
EARLY = [good(update("D", 0, "r1", qty=1)), good(snapshot("D", 1, {"r1": {"qty": 10}})),
         good(update("D", 2, "r1", status="ok"))]
ENDED = [good(snapshot("E", 0, {"r1": {"qty": 1}})), good(EndEvent("E", 1, T0))]
MALFORMED = [
    Message(b"M1", b"{not json", malformed="INVALID_JSON"),
    Message(b"M2", b'{"type":"update","session_id":"M2","seq":0,"ts":"2026-11-21T08:00:00Z"}',
            malformed="MISSING_FIELD"),
    Message(b"M3", b'{"type":"update","session_id":"M3","seq":"zero","ts":"2026-11-21T08:00:00Z","row_id":"r",'
                   b'"values":{}}', malformed="WRONG_TYPE"),
    Message(b"M4", b'{"type":"merge","session_id":"M4","seq":0,"ts":"2026-11-21T08:00:00Z"}',
            malformed="UNKNOWN_TYPE"),
    Message(b"other", encode(update("M5", 0, "r1", qty=1)), malformed="KEY_MISMATCH"),
    Message(b"M6", b'{"pad":"' + b"x" * 5000 + b'"}', malformed="OVERSIZED"),
    Message(None, encode(update("M7", 0, "r1", qty=1)), malformed="KEY_MISMATCH"),
    Message(b"M8", None, malformed="INVALID_JSON"),
]
MAX_MESSAGE_BYTES = 4096
DAMAGED_SESSIONS = {"B": ("SEQUENCE_GAP", 2, 3), "C": ("DUPLICATE_SEQ", 2, 1), "D": ("UPDATE_BEFORE_SNAPSHOT", None, 0)}
"""session -> (reason, expected seq, seen seq) of its first damaged message."""
DAMAGED_INDEX = {"B": 2, "C": 2, "D": 0}
"""session -> position of its first damaged message in its own traffic list."""
ALL_TRAFFIC = CLEAN + GAP + DUPLICATE + EARLY + ENDED + MALFORMED


def replay(messages: list[Message]) -> dict[str, Table]:
    """Reference tables of open sessions when every decodable event is applied (tier none)."""
    tables: dict[str, Table] = {}
    for message in messages:
        if message.event is None:
            continue
        event = message.event
        tables[event.session_id] = apply_event(tables.get(event.session_id, {}), event)
        if isinstance(event, EndEvent):
            del tables[event.session_id]
    return tables


RESYNC_TABLES = {
    "A": replay(CLEAN)["A"],
    "B": {"r9": {"qty": 9, "price": 9.5}},
    "C": {"r1": {"qty": 30}},
    "D": {"r1": {"qty": 10, "status": "ok"}},
}
"""Strict tier with on_gap=resync: damaged intervals skipped, every session recovered at its snapshot."""
RESYNC_DEAD = {"B": ["SEQUENCE_GAP", "RESYNC_SKIPPED"], "C": ["DUPLICATE_SEQ", "RESYNC_SKIPPED"],
               "D": ["UPDATE_BEFORE_SNAPSHOT"]}
