"""The wire format: typed events, compact JSON, the reference decoder and reconstruction."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from streamwarden.wire import (
    DEMO_SCHEMA,
    Decoder,
    DeleteEvent,
    EndEvent,
    Row,
    SchemaError,
    SessionEvent,
    SnapshotEvent,
    Table,
    TableSchema,
    UpdateEvent,
    WireErrorKind,
    WireFormatError,
    apply_event,
    decode,
    encode,
)

TS = datetime(2026, 11, 21, 10, 0, 0, 123456, tzinfo=UTC)
SCHEMA = TableSchema.parse({"price": "double", "qty": "long", "status": "string", "ok": "boolean",
                            "at": "timestamp"})
EVENTS: list[SessionEvent] = [
    SnapshotEvent("s0-1-000001", 0, TS, (
        Row("r1", {"price": 1.5, "qty": 3, "status": "open", "ok": True, "at": "2026-11-21T09:00:00Z"}),
        Row("r2", {"price": 2.0, "status": "new"}),
    )),
    UpdateEvent("s0-1-000001", 1, TS, "r1", {"qty": 4}),
    DeleteEvent("s0-1-000001", 2, TS, "r2"),
    EndEvent("s0-1-000001", 3, TS),
]


def message(**fields: Any) -> bytes:
    base: dict[str, Any] = {"type": "update", "session_id": "s", "seq": 1, "ts": "2026-11-21T10:00:00Z",
                            "row_id": "r", "values": {"qty": 1}}
    base.update(fields)
    return json.dumps({k: v for k, v in base.items() if v is not ...}).encode()


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: e.type)
def test_round_trip(event: SessionEvent) -> None:
    data = encode(event)
    assert decode(event.session_id.encode(), data, SCHEMA) == event
    assert data.startswith(b'{"type":"%s","session_id":"s0-1-000001","seq":' % event.type.encode())
    assert b" " not in data  # compact


def test_wire_form_matches_the_contract() -> None:
    assert json.loads(encode(EVENTS[1])) == {"type": "update", "session_id": "s0-1-000001", "seq": 1,
                                             "ts": "2026-11-21T10:00:00.123456Z", "row_id": "r1",
                                             "values": {"qty": 4}}
    second_row = json.loads(encode(EVENTS[0]))["rows"][1]
    assert second_row == {"row_id": "r2", "values": {"price": 2.0, "status": "new"}}


def test_padding_is_ignored_by_readers() -> None:
    padded = encode(EVENTS[3], pad_to=300)
    assert len(padded) == 300
    assert decode(b"s0-1-000001", padded, SCHEMA) == EVENTS[3]
    assert encode(EVENTS[3], pad_to=10) == encode(EVENTS[3])


def test_decoder_normalises_and_ignores_what_the_spark_schema_ignores() -> None:
    event = decode(b"s", message(values={"price": 2, "extra": "x", "qty": None}, unknown_field=1), SCHEMA)
    assert isinstance(event, UpdateEvent)
    assert event.values == {"price": 2.0, "qty": None}
    assert isinstance(event.values["price"], float)
    offset = decode(b"s", message(ts="2026-11-21T12:00:00.5+02:00"), SCHEMA)
    assert offset.ts == datetime(2026, 11, 21, 10, 0, 0, 500000, tzinfo=UTC)
    assert offset.ts.tzinfo == timezone(timedelta(hours=2))


@pytest.mark.parametrize(("key", "value", "kind", "field"), [
    (b"s", b'{"type":', WireErrorKind.INVALID_JSON, None),
    (b"s", b"\xff\xfe", WireErrorKind.INVALID_JSON, None),
    (b"s", None, WireErrorKind.INVALID_JSON, None),
    (b"s", message(values={"price": float("nan")}), WireErrorKind.INVALID_JSON, None),
    (b"s", message(seq=...), WireErrorKind.MISSING_FIELD, "seq"),
    (b"s", message(type=...), WireErrorKind.MISSING_FIELD, "type"),
    (b"s", message(values=...), WireErrorKind.MISSING_FIELD, "values"),
    (b"s", message(type="snapshot", rows=[{"values": {}}]), WireErrorKind.MISSING_FIELD, "rows[0].row_id"),
    (b"s", b"[1, 2]", WireErrorKind.WRONG_TYPE, None),
    (b"s", message(seq="1"), WireErrorKind.WRONG_TYPE, "seq"),
    (b"s", message(seq=-1), WireErrorKind.WRONG_TYPE, "seq"),
    (b"s", message(seq=True), WireErrorKind.WRONG_TYPE, "seq"),
    (b"", message(session_id=""), WireErrorKind.WRONG_TYPE, "session_id"),
    (b"s", message(ts="2026-11-21T10:00:00"), WireErrorKind.WRONG_TYPE, "ts"),
    (b"s", message(ts="yesterday"), WireErrorKind.WRONG_TYPE, "ts"),
    (b"s", message(values={"qty": 1.5}), WireErrorKind.WRONG_TYPE, "values.qty"),
    (b"s", message(values={"qty": True}), WireErrorKind.WRONG_TYPE, "values.qty"),
    (b"s", message(values={"qty": 2**63}), WireErrorKind.WRONG_TYPE, "values.qty"),
    (b"s", message(values={"price": "1.5"}), WireErrorKind.WRONG_TYPE, "values.price"),
    (b"s", message(values={"ok": 1}), WireErrorKind.WRONG_TYPE, "values.ok"),
    (b"s", message(values={"at": "noon"}), WireErrorKind.WRONG_TYPE, "values.at"),
    (b"s", message(values=[1]), WireErrorKind.WRONG_TYPE, "values"),
    (b"s", message(type="snapshot", rows=[{"row_id": "r", "values": {"status": 7}}]),
     WireErrorKind.WRONG_TYPE, "rows[0].values.status"),
    (b"s", message(type="snapshot", rows={}), WireErrorKind.WRONG_TYPE, "rows"),
    (b"s", message(type="upsert"), WireErrorKind.UNKNOWN_TYPE, "type"),
    (b"s", message(type=None), WireErrorKind.WRONG_TYPE, "type"),
    (None, message(), WireErrorKind.KEY_MISMATCH, None),
    (b"other", message(), WireErrorKind.KEY_MISMATCH, None),
])
def test_decode_errors(
    key: bytes | None, value: bytes | None, kind: WireErrorKind, field: str | None
) -> None:
    with pytest.raises(WireFormatError) as caught:
        decode(key, value, SCHEMA)
    assert caught.value.kind is kind
    assert caught.value.field == field
    assert str(caught.value).startswith(kind.value)


def outcome(decoder: Any, key: bytes | None, value: bytes | None) -> tuple[str, ...]:
    """What decoding gives, types and all: the event's repr (``1`` and ``1.0`` differ), or the error."""
    try:
        return ("event", repr(decoder(key, value)))
    except WireFormatError as error:
        return ("error", error.kind.value, str(error.field), str(error))


TRICKY = [None, True, False, 0, -0.0, 1, 1.5, 1e2, -(2**63), 2**63 - 1, 2**63, -(2**63) - 1, 10**30, "", "x",
          "2026-11-21T10:00:00Z", "2026-11-21T12:00:00.5+02:00", "2026-11-21T10:00:00", "2026-11-21 10:00:00Z",
          "2026-11-21T10:00:00.1234567Z", "é", [], {}, [{"row_id": "r", "values": {}}], {"qty": 1}]
RAW_TRICKS = [b"1e400", b"-0", b"1.0", b"9007199254740993", rb'"\ud83d\ude00"', rb'"\u0000"', b'"\xff"']


def broken_variants(rng: random.Random, event: SessionEvent) -> list[tuple[bytes | None, bytes]]:
    """A valid message and variants of it: a field dropped, retyped, doubled; unknown fields; bytes cut."""
    key = event.session_id.encode()
    document = json.loads(encode(event))
    paths: list[tuple[Any, str]] = [(document, name) for name in document]
    for row in document.get("rows", [])[:2]:
        paths += [(row, "row_id"), (row, "values")] + [(row["values"], c) for c in SCHEMA.names]
    if "values" in document:
        paths += [(document["values"], c) for c in SCHEMA.names]
    variants: list[tuple[bytes | None, bytes]] = [(k, encode(event)) for k in (key, b"other", None)]
    for holder, name in rng.sample(paths, min(len(paths), 6)):
        original = holder.get(name, ...)
        for replacement in [*rng.sample(TRICKY, 6), ...]:
            if replacement is ...:
                holder.pop(name, None)
            else:
                holder[name] = replacement
            variants.append((key, json.dumps(document).encode()))
        holder[name] = "placeholder"
        text = json.dumps(document)
        for raw in rng.sample(RAW_TRICKS, 3):  # numbers and escapes as written, not as json.dumps writes them
            variants.append((key, text.encode().replace(b'"placeholder"', raw, 1)))
        if original is ...:
            holder.pop(name, None)
        else:
            holder[name] = original
    text = json.dumps(document)
    variants += [
        (key, text[:-1].encode() + b', "pad": "\xff\xfe"}'),  # invalid UTF-8 in a field nobody reads
        (key, text[:-1].encode() + b', "unknown": {"a": [1, 2.5, null]}}'),
        (key, text[:-1].encode() + b', "seq": 7}'),  # a field given twice: the last one counts
        (key, text.encode()[: rng.randrange(1, len(text))]),
        (key, text.encode() + b" x"),
    ]
    return variants


def test_the_typed_decoder_gives_what_the_reference_gives() -> None:
    """On valid messages and thousands of broken ones: the same event (types included) or the same error."""
    rng = random.Random(11)
    decoder = Decoder(SCHEMA)
    events = [*EVENTS, SnapshotEvent("s1", 0, TS, (), "req-1"),
              UpdateEvent("s1", 5, TS, "r", {"price": 2.0, "qty": -(2**63), "at": "2026-11-21T12:00:00.5+02:00",
                                             "ok": False, "status": None})]
    compared = accepted = 0
    for event in events * 8:
        for key, value in broken_variants(rng, event):
            expected = outcome(lambda k, v: decode(k, v, SCHEMA), key, value)
            assert outcome(decoder, key, value) == expected, value
            compared += 1
            accepted += expected[0] == "event"
    assert compared > 1000 and 100 < accepted < compared  # both sides of the fallback were exercised
    assert outcome(Decoder(SCHEMA, max_bytes=10), b"s0-1-000001", encode(EVENTS[3]))[1] == "oversized"


def test_oversized() -> None:
    value = message(values={"status": "x" * 200})
    assert decode(b"s", value, SCHEMA, max_bytes=len(value))
    with pytest.raises(WireFormatError) as caught:
        decode(b"s", value, SCHEMA, max_bytes=len(value) - 1)
    assert caught.value.kind is WireErrorKind.OVERSIZED


def test_events_refuse_invalid_headers() -> None:
    with pytest.raises(ValueError, match="invalid event"):
        EndEvent("s", 0, datetime(2026, 1, 1))  # naive timestamp
    with pytest.raises(ValueError, match="invalid event"):
        EndEvent("s", -1, TS)
    with pytest.raises(ValueError, match="invalid event"):
        EndEvent("", 0, TS)


def test_schema_parsing() -> None:
    parsed = TableSchema.parse('{"price": "double", "qty": "long"}')
    assert parsed.to_dict() == {"price": "double", "qty": "long"}
    assert DEMO_SCHEMA.names[:2] == ("price", "qty")
    assert list(DEMO_SCHEMA) == list(DEMO_SCHEMA.columns)
    assert len(SCHEMA) == 5


@pytest.mark.parametrize(("spec", "message_part"), [
    ('{"price": "decimal"}', "column 'price': unknown type 'decimal'"),
    ({"qty": 3}, "column 'qty': unknown type 3"),
    ({"bad name": "string"}, "column 'bad name'"),
    ({"row_id": "string"}, "column 'row_id': reserved"),
    ({}, "at least one column"),
    ("{", "not valid JSON"),
    ("[]", "must be an object"),
])
def test_schema_errors_name_the_culprit(spec: Any, message_part: str) -> None:
    with pytest.raises(SchemaError, match=message_part.replace("(", r"\(")):
        TableSchema.parse(spec)


def test_schema_refuses_duplicates() -> None:
    with pytest.raises(SchemaError, match="column 'a': defined twice"):
        TableSchema.parse('{"a": "long", "a": "string"}')
    with pytest.raises(SchemaError, match="column 'a': defined twice"):
        TableSchema((("a", "long"), ("a", "string")))


def test_apply_event_semantics() -> None:
    table: Table = {}
    for event in EVENTS[:2]:
        table = apply_event(table, event)
    # the partial update changed qty and kept the other columns; nulls of the snapshot are not stored
    assert table == {
        "r1": {"price": 1.5, "qty": 4, "status": "open", "ok": True, "at": "2026-11-21T09:00:00Z"},
        "r2": {"price": 2.0, "status": "new"},
    }
    before = {row_id: dict(row) for row_id, row in table.items()}
    after_null = apply_event(table, UpdateEvent("s0-1-000001", 2, TS, "r2", {"price": None, "qty": 9}))
    assert after_null["r2"] == {"price": 2.0, "status": "new", "qty": 9}  # null keeps the previous value
    inserted = apply_event(table, UpdateEvent("s0-1-000001", 2, TS, "r3", {"qty": 1}))
    assert inserted["r3"] == {"qty": 1}
    deleted = apply_event(table, EVENTS[2])
    assert set(deleted) == {"r1"}
    assert apply_event(deleted, DeleteEvent("s0-1-000001", 3, TS, "missing")) == deleted
    assert table == before  # pure: the input is never modified
    snapshot = SnapshotEvent("s0-1-000001", 0, TS, (Row("r9", {"qty": 1, "status": None}),))
    replaced = apply_event(table, snapshot)
    assert replaced == {"r9": {"qty": 1}}
    assert apply_event(table, EVENTS[3]) == {}
