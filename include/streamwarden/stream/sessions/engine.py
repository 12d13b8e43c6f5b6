"""Applies one session's events in order under an integrity tier: the pure core of the stateful job.

No Spark here: :func:`process_session` takes the session's stored meta and handler state plus this
batch's raw records (already sorted by topic, partition, offset) and returns the new meta and state,
the output rows and the dead letters. Every record ends up in exactly one of the two lists, or the
call raises a classified error (INTEGRITY, MALFORMED) that stops the job.

Tiers:

* ``none``: apply whatever decodes.
* ``fuzzy``: an event whose time is more than ``lateness`` behind the latest event time of its session
  (its event-time watermark) is a dead letter (``LATE_EVENT``); sequence numbers are not checked.
* ``strict``: an update/delete/end before any snapshot, a duplicate ``seq`` or a ``seq`` gap is an
  INTEGRITY failure naming session, expected and seen seq, topic, partition, offset; a session seen in
  two topic-partitions is always one. With ``on_gap=resync`` the damaged event and everything after it
  up to the session's next snapshot become dead letters instead (``SEQUENCE_GAP``, ``DUPLICATE_SEQ``,
  ``UPDATE_BEFORE_SNAPSHOT``, then ``RESYNC_SKIPPED``) and the job keeps running.

Malformed input (any :class:`~streamwarden.wire.WireErrorKind`) is a dead letter, or a MALFORMED failure
with ``malformed_policy=fail``.

Session boundaries are marked on the applied rows (:class:`Boundary`): a session's first snapshot is its
``start``, a later snapshot in sequence a ``snapshot``, the snapshot that heals a session held for resync a
``resync``, and its ``end`` an ``end``. An ``end`` always releases the session's state, also when it is a
dead letter (a session held for resync, a late end): the session is over either way, and its state is
released at once instead of at the session timeout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal, NamedTuple

import msgspec

from streamwarden.failures import IntegrityError, MalformedDataError
from streamwarden.session_handler import OutputRow, SessionHandler
from streamwarden.wire import (
    DEFAULT_MAX_MESSAGE_BYTES,
    EndEvent,
    SessionEvent,
    SnapshotEvent,
    TableSchema,
    WireFormatError,
    decoder_for,
)

Tier = Literal["none", "fuzzy", "strict"]


class DeadReason(StrEnum):
    """Error classes of dead letters that are not wire-format errors."""

    SEQUENCE_GAP = "SEQUENCE_GAP"
    DUPLICATE_SEQ = "DUPLICATE_SEQ"
    UPDATE_BEFORE_SNAPSHOT = "UPDATE_BEFORE_SNAPSHOT"
    RESYNC_SKIPPED = "RESYNC_SKIPPED"
    LATE_EVENT = "LATE_EVENT"


class Boundary(StrEnum):
    """Where an applied event stands in its session's life (the ``boundary`` column; null for the rest)."""

    START = "start"  # the first snapshot of a session
    SNAPSHOT = "snapshot"  # a later snapshot, in sequence
    RESYNC = "resync"  # the snapshot that heals a session held for resync
    END = "end"


@dataclass(frozen=True)
class SessionPolicy:
    """How hard to check a session's events (from the settings)."""

    tier: Tier = "strict"
    on_gap: Literal["fail", "resync"] = "fail"
    malformed: Literal["quarantine", "fail"] = "quarantine"
    lateness_s: float = 300.0
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES


@dataclass
class SessionMeta:
    """What the framework remembers per session, next to the handler's state."""

    next_seq: int | None = None
    topic: str | None = None
    partition: int | None = None
    max_event_time: str | None = None
    resync_since: dict[str, Any] | None = None

    def to_json(self) -> str:
        """Compact JSON, keys sorted (msgspec: a tenth of ``json.dumps(asdict(...))``'s time, once per session
        and batch); reads back what either wrote."""
        return _META_ENCODER.encode(self).decode()

    @classmethod
    def from_json(cls, text: str) -> SessionMeta:
        return msgspec.json.decode(text, type=cls)


_META_ENCODER = msgspec.json.Encoder(order="sorted")


class RawRecord(NamedTuple):
    """One Kafka record of the session (a tuple: one is built per record, at a tenth of a frozen dataclass's cost)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: datetime | None  # the Kafka timestamp, UTC (the job passes it naive, in UTC)


class AppliedEvent(NamedTuple):
    """An applied event with the output rows it caused, and the session boundary it is (if any).

    One per event, not per row: a snapshot's rows share their event's columns, which the output repeats."""

    record: RawRecord
    event: SessionEvent
    rows: Sequence[OutputRow]
    boundary: Boundary | None = None

    @property
    def restart_request(self) -> str | None:
        """The restart request the event's snapshot answers (the ``restart_request`` column)."""
        return self.event.restart_request if isinstance(self.event, SnapshotEvent) else None


class DeadLetter(NamedTuple):
    """A record that was not applied, and why."""

    record: RawRecord
    error_class: str
    message: str


@dataclass
class SessionResult:
    """The outcome of one batch for one session."""

    meta: SessionMeta
    state: Any
    applied: list[AppliedEvent] = field(default_factory=list)
    dead: list[DeadLetter] = field(default_factory=list)
    released: bool = False
    rows: int = 0  # the output rows of ``applied``


def process_session(
    meta: SessionMeta,
    state: Any,
    records: list[RawRecord],
    *,
    handler: SessionHandler[Any],
    schema: TableSchema,
    policy: SessionPolicy,
) -> SessionResult:
    """Apply ``records`` (sorted by topic, partition, offset) to one session."""
    result = SessionResult(meta, state)
    decode = decoder_for(schema, policy.max_message_bytes)
    applied, dead, on_event = result.applied, result.dead, handler.on_event  # looked up once: a call per record
    rows_out, released = 0, False
    # the session's event-time watermark, kept parsed while the batch runs and stored as text once, at the end
    watermark = None if meta.max_event_time is None else datetime.fromisoformat(meta.max_event_time)
    for record in records:
        try:
            event = decode(record.key, record.value)
        except WireFormatError as error:
            if policy.malformed == "fail":
                raise MalformedDataError(str(error), topic=record.topic, partition=record.partition,
                                         offset=record.offset, details={"kind": error.kind.value}) from None
            dead.append(DeadLetter(record, error.kind.value.upper(), str(error)))
            continue
        refusal = _refusal(meta, watermark, event, record, policy)
        if refusal is not None:
            dead.append(DeadLetter(record, *refusal))
        else:
            boundary = _boundary(meta, event)
            state, rows = on_event(state, event)
            applied.append(AppliedEvent(record, event, rows, boundary))
            rows_out += len(rows)
            _advance(meta, event, record)
            if watermark is None or event.ts > watermark:
                watermark = event.ts
        if isinstance(event, EndEvent):
            meta, state, released = SessionMeta(), handler.initial_state(), True
            watermark = None
        elif refusal is None:
            released = False
    meta.max_event_time = None if watermark is None else watermark.isoformat()
    result.meta, result.state, result.rows, result.released = meta, state, rows_out, released
    return result


def _boundary(meta: SessionMeta, event: SessionEvent) -> Boundary | None:
    """The boundary ``event`` marks, given the session's meta before it is applied."""
    if isinstance(event, EndEvent):
        return Boundary.END
    if not isinstance(event, SnapshotEvent):
        return None
    if meta.resync_since is not None:
        return Boundary.RESYNC
    return Boundary.START if meta.next_seq is None else Boundary.SNAPSHOT


def _refusal(meta: SessionMeta, watermark: datetime | None, event: SessionEvent, record: RawRecord,
             policy: SessionPolicy) -> tuple[str, str] | None:
    """Why ``event`` must not be applied (a dead letter), ``None`` to apply; raises when the job must stop.
    ``watermark``: the latest event time applied to the session (``meta.max_event_time``, parsed)."""
    moved = meta.partition is not None and (meta.partition != record.partition or meta.topic != record.topic)
    if moved and policy.tier == "strict":
        raise IntegrityError(
            f"session {event.session_id} seen in two topic-partitions: {meta.topic}[{meta.partition}] and "
            f"{record.topic}[{record.partition}] (its producer must key every message by session id)",
            details={"session_id": event.session_id, "first": [meta.topic, meta.partition]}, **_where(record))
    if policy.tier == "none":
        return None
    if policy.tier == "fuzzy":
        if watermark is not None:
            behind = (watermark - event.ts).total_seconds()
            if behind > policy.lateness_s:
                return DeadReason.LATE_EVENT, (f"event time {event.ts.isoformat()} is {behind:.0f}s behind the "
                                               f"session's watermark (lateness bound {policy.lateness_s:.0f}s)")
        return None
    return _strict_refusal(meta, event, record, policy)


def _where(record: RawRecord) -> dict[str, Any]:
    """Where a record is, as a classified failure names it."""
    return {"topic": record.topic, "partition": record.partition, "offset": record.offset}


def _strict_refusal(meta: SessionMeta, event: SessionEvent, record: RawRecord,
                    policy: SessionPolicy) -> tuple[str, str] | None:
    snapshot = isinstance(event, SnapshotEvent)
    if meta.resync_since is not None:
        if snapshot:
            return None
        return DeadReason.RESYNC_SKIPPED, (
            f"session {event.session_id} awaits its next snapshot since offset {meta.resync_since['offset']} "
            f"({meta.resync_since['reason']}); seq {event.seq} skipped")
    expected = meta.next_seq
    if expected is None:
        if snapshot:
            return None
        reason, text = DeadReason.UPDATE_BEFORE_SNAPSHOT, f"{event.type} before any snapshot"
    elif event.seq == expected or (snapshot and policy.on_gap == "resync"):
        return None
    elif event.seq < expected:
        reason, text = DeadReason.DUPLICATE_SEQ, "duplicate seq"
    else:
        reason, text = DeadReason.SEQUENCE_GAP, "seq gap"
    message = (f"{text} in session {event.session_id}: expected seq {expected}, saw {event.seq} "
               f"at {record.topic}[{record.partition}]@{record.offset}")
    if policy.on_gap == "fail":
        raise IntegrityError(message, details={"session_id": event.session_id, "reason": reason.value,
                                               "expected_seq": expected, "seen_seq": event.seq},
                             **_where(record))
    meta.resync_since = {"offset": record.offset, "seq": event.seq, "expected_seq": expected, "reason": reason}
    return reason, f"{message}; session quarantined until its next snapshot"


def _advance(meta: SessionMeta, event: SessionEvent, record: RawRecord) -> None:
    meta.next_seq = event.seq + 1
    meta.topic, meta.partition = record.topic, record.partition
    meta.resync_since = None
