"""The wire format collection points publish: typed session events, their JSON encoding, a reference decoder.

Key: the session id (UTF-8). Value: compact UTF-8 JSON, one of ``snapshot``, ``update``, ``delete``, ``end``
(see ``docs/wire-format.md``). The demo producer encodes with :func:`encode`; the streaming job parses with
explicit Spark schemas, and :func:`decode` is the reference that tests hold both to (:class:`Decoder`, the
session job's, gives its results faster). :func:`apply_event` is the reference reconstruction of a session's
table. No Spark here.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal, TypeAlias, cast, get_args

import msgspec

ColumnType: TypeAlias = Literal["string", "long", "double", "boolean", "timestamp"]
COLUMN_TYPES: tuple[ColumnType, ...] = get_args(ColumnType)
Value: TypeAlias = str | int | float | bool | None
"""A column value as it travels in JSON; ``timestamp`` columns carry ISO-8601 strings with an offset."""
Table: TypeAlias = dict[str, dict[str, Value]]
"""A session's table: row id -> column -> value. Null columns are absent from the row."""

DEFAULT_MAX_MESSAGE_BYTES = 1024 * 1024
RESERVED_COLUMNS = frozenset({"session_id", "row_id"})
_COLUMN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_ISO_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})$")
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_ENCODER = msgspec.json.Encoder()  # encodes the events in field order, 10x faster than json


class SchemaError(ValueError):
    """An invalid table schema; the message names the bad column or type."""


class WireErrorKind(StrEnum):
    """Why a message could not be decoded (the error class recorded with quarantined input)."""

    INVALID_JSON = "invalid_json"
    MISSING_FIELD = "missing_field"
    WRONG_TYPE = "wrong_type"
    UNKNOWN_TYPE = "unknown_type"
    KEY_MISMATCH = "key_mismatch"
    OVERSIZED = "oversized"


class WireFormatError(ValueError):
    """A message that breaks the wire format; ``kind`` classifies it, ``field`` names the culprit if any."""

    def __init__(self, kind: WireErrorKind, message: str, field: str | None = None) -> None:
        super().__init__(f"{kind.value}: {message}")
        self.kind = kind
        self.field = field


@dataclass(frozen=True)
class TableSchema:
    """The typed columns of ``values``, in order (name -> type)."""

    columns: tuple[tuple[str, ColumnType], ...]

    def __post_init__(self) -> None:
        if not self.columns:
            raise SchemaError("a table schema needs at least one column")
        seen: set[str] = set()
        for name, type_ in self.columns:
            if not isinstance(name, str) or not _COLUMN_NAME.match(name):
                raise SchemaError(f"column {name!r}: names must match {_COLUMN_NAME.pattern}")
            if name in RESERVED_COLUMNS:
                raise SchemaError(f"column {name!r}: reserved ({', '.join(sorted(RESERVED_COLUMNS))})")
            if name in seen:
                raise SchemaError(f"column {name!r}: defined twice")
            if type_ not in COLUMN_TYPES:
                allowed = ", ".join(COLUMN_TYPES)
                raise SchemaError(f"column {name!r}: unknown type {type_!r}; allowed: {allowed}")
            seen.add(name)

    @classmethod
    def parse(cls, spec: str | Mapping[str, Any]) -> TableSchema:
        """From a mapping or its JSON text, e.g. ``{"price": "double", "qty": "long"}``."""
        if isinstance(spec, str):
            try:  # objects as tuples of pairs, so that a column given twice is refused, not overwritten
                parsed = json.loads(spec, object_pairs_hook=tuple)
            except json.JSONDecodeError as exc:
                raise SchemaError(f"table schema is not valid JSON: {exc}") from None
            if not isinstance(parsed, tuple):
                raise SchemaError(f"table schema must be an object of name -> type, got {spec!r}")
            pairs = parsed
        elif isinstance(spec, Mapping):
            pairs = tuple(spec.items())
        else:
            raise SchemaError(f"table schema must be an object of name -> type, got {type(spec).__name__}")
        return cls(tuple((name, cast(ColumnType, type_)) for name, type_ in pairs))

    def to_dict(self) -> dict[str, ColumnType]:
        return dict(self.columns)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.columns)

    def __iter__(self) -> Iterator[tuple[str, ColumnType]]:
        return iter(self.columns)

    def __len__(self) -> int:
        return len(self.columns)


DEMO_SCHEMA = TableSchema.parse({"price": "double", "qty": "long", "status": "string", "venue": "string",
                                 "active": "boolean"})


class Row(msgspec.Struct, frozen=True):
    """One row of a snapshot."""

    row_id: str
    values: Mapping[str, Value]


class _Event(msgspec.Struct, frozen=True, tag_field="type"):
    """Fields every event has (``type``, the tag, is fixed per subclass and encoded first); ``ts`` must be zoned.

    Frozen msgspec structs, not dataclasses: one is built per message, at a tenth of a frozen dataclass's cost.
    """

    type: ClassVar[str]
    session_id: str
    seq: int
    ts: datetime

    def __post_init__(self) -> None:
        if not self.session_id or self.seq < 0 or self.ts.tzinfo is None:
            raise ValueError(f"invalid event: session_id={self.session_id!r} seq={self.seq} ts={self.ts}")


class SnapshotEvent(_Event, frozen=True, tag="snapshot", omit_defaults=True):
    """Replaces the whole table of the session; opens every session (``seq`` 0).

    ``restart_request`` names the control command (its ``request_id``) this snapshot answers, when the
    session was opened because of one; encoded only when set.
    """

    type: ClassVar[Literal["snapshot"]] = "snapshot"
    rows: tuple[Row, ...]
    restart_request: str | None = None


class UpdateEvent(_Event, frozen=True, tag="update"):
    """Upserts one row; columns absent from ``values`` (or null) keep their previous value."""

    type: ClassVar[Literal["update"]] = "update"
    row_id: str
    values: Mapping[str, Value]


class DeleteEvent(_Event, frozen=True, tag="delete"):
    """Removes one row."""

    type: ClassVar[Literal["delete"]] = "delete"
    row_id: str


class EndEvent(_Event, frozen=True, tag="end"):
    """Closes the session; no message follows with its id."""

    type: ClassVar[Literal["end"]] = "end"


SessionEvent: TypeAlias = SnapshotEvent | UpdateEvent | DeleteEvent | EndEvent
EVENT_TYPES = ("snapshot", "update", "delete", "end")


def format_ts(ts: datetime) -> str:
    """``ts`` as the wire writes it (RFC 3339, ``Z`` for UTC), for ``timestamp`` columns; must be zoned."""
    if ts.tzinfo is None:
        raise ValueError(f"timestamp {ts!r} has no time zone")
    return _ENCODER.encode(ts.astimezone(UTC))[1:-1].decode()


def encode(event: SessionEvent, pad_to: int = 0) -> bytes:
    """Compact UTF-8 JSON of an event, ``type`` first; ``ts`` as RFC 3339 (``Z`` for UTC).

    ``pad_to`` grows shorter values to at least that many bytes with a top-level ``"pad"`` string, which
    readers ignore (unknown top-level fields are allowed); used to benchmark larger messages.
    """
    data = _ENCODER.encode(event)
    missing = pad_to - len(data)
    if missing > 0:
        data = data[:-1] + b',"pad":"' + b"x" * max(0, missing - 9) + b'"}'
    return data


def decode(
    key: bytes | None,
    value: bytes | None,
    schema: TableSchema,
    max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
) -> SessionEvent:
    """The event in a Kafka message, validated against the contract, or :class:`WireFormatError`.

    Columns of ``values`` not in ``schema`` are dropped (as a Spark schema drops them); unknown top-level
    fields are ignored.
    """
    if value is None:
        raise WireFormatError(WireErrorKind.INVALID_JSON, "null value (tombstone)")
    if len(value) > max_bytes:
        raise WireFormatError(WireErrorKind.OVERSIZED, f"value of {len(value)} bytes exceeds {max_bytes}")
    try:
        document = msgspec.json.decode(value)  # strict JSON: NaN, Infinity, trailing data are errors
    except ValueError as exc:  # msgspec.DecodeError, UnicodeDecodeError
        raise WireFormatError(WireErrorKind.INVALID_JSON, str(exc)) from None
    if not isinstance(document, dict):
        raise WireFormatError(WireErrorKind.WRONG_TYPE, f"value must be a JSON object, not {_kind(document)}")
    type_ = _field(document, "type", str, "a string")
    session_id = _field(document, "session_id", str, "a string")
    if not session_id:
        raise WireFormatError(WireErrorKind.WRONG_TYPE, "session_id must not be empty", "session_id")
    seq = _field(document, "seq", int, "an integer")
    if isinstance(seq, bool) or not 0 <= seq <= _LONG_MAX:
        raise WireFormatError(WireErrorKind.WRONG_TYPE, f"seq must be a non-negative long, got {seq}", "seq")
    ts = _timestamp(_field(document, "ts", str, "an ISO-8601 string"), "ts")
    if key is None or key != session_id.encode():
        shown = None if key is None else key.decode(errors="replace")
        raise WireFormatError(WireErrorKind.KEY_MISMATCH, f"key {shown!r} is not session_id {session_id!r}")
    if type_ == "snapshot":
        rows = _field(document, "rows", list, "an array")
        restart_request = document.get("restart_request")
        if restart_request is not None and not isinstance(restart_request, str):
            message = f"restart_request must be a string, not {_kind(restart_request)}"
            raise WireFormatError(WireErrorKind.WRONG_TYPE, message, "restart_request")
        return SnapshotEvent(session_id, seq, ts, tuple(_row(item, f"rows[{i}]", schema)
                                                        for i, item in enumerate(rows)), restart_request)
    if type_ == "update":
        row_id = _field(document, "row_id", str, "a string")
        return UpdateEvent(session_id, seq, ts, row_id, _values(document, "values", schema))
    if type_ == "delete":
        return DeleteEvent(session_id, seq, ts, _field(document, "row_id", str, "a string"))
    if type_ == "end":
        return EndEvent(session_id, seq, ts)
    allowed = ", ".join(EVENT_TYPES)
    raise WireFormatError(WireErrorKind.UNKNOWN_TYPE, f"unknown type {type_!r}; allowed: {allowed}", "type")


_TYPED_COLUMNS: dict[ColumnType, Any] = {
    "string": str, "boolean": bool, "timestamp": str,  # timestamps are checked as the reference checks them
    "long": Annotated[int, msgspec.Meta(ge=_LONG_MIN, le=_LONG_MAX)],
    "double": float,  # JSON integers are taken as floats, as ``float()`` takes them; overflow is an error
}


class Decoder:
    """:func:`decode` for one schema, several times faster on valid messages, with the same results.

    msgspec decodes a message straight into structs typed by the schema (the values checked as it reads
    them); anything it refuses (and a timestamp or key the reference refuses) is decoded again by
    :func:`decode`, which raises the classified error. Where the typed path accepts a message, the reference
    returns the same event (``tests/unit/test_wire.py`` holds the two to it over valid and broken messages).
    Unknown fields are skipped unparsed, so the UTF-8 of a message is checked first, as the reference does.
    """

    def __init__(self, schema: TableSchema, max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> None:
        self.schema, self.max_bytes = schema, max_bytes
        values = msgspec.defstruct(  # fields c0, c1, ... renamed to the columns: any column name is safe
            "Values", [(f"c{i}", _TYPED_COLUMNS[type_] | None | msgspec.UnsetType, msgspec.UNSET)
                       for i, (_, type_) in enumerate(schema.columns)],
            rename={f"c{i}": name for i, name in enumerate(schema.names)})
        row = msgspec.defstruct("Row", [("row_id", str), ("values", values)])
        header = [("session_id", Annotated[str, msgspec.Meta(min_length=1)]),
                  ("seq", Annotated[int, msgspec.Meta(ge=0, le=_LONG_MAX)]), ("ts", str)]
        self._timestamps = [name for name, type_ in schema.columns if type_ == "timestamp"]
        self._snapshot = msgspec.defstruct("snapshot", [*header, ("rows", list[row]),  # type: ignore[valid-type]
                                                        ("restart_request", str | None, None)], tag=True,
                                           tag_field="type")
        self._update = msgspec.defstruct("update", [*header, ("row_id", str), ("values", values)], tag=True,
                                         tag_field="type")
        self._delete = msgspec.defstruct("delete", [*header, ("row_id", str)], tag=True, tag_field="type")
        self._end = msgspec.defstruct("end", header, tag=True, tag_field="type")
        self._decoder = msgspec.json.Decoder(self._snapshot | self._update | self._delete | self._end)

    def __call__(self, key: bytes | None, value: bytes | None) -> SessionEvent:
        """The event in a Kafka message, or :class:`WireFormatError` (as :func:`decode`)."""
        if value is not None and len(value) <= self.max_bytes and key is not None:
            try:
                event = self._typed(key, value)
            except (msgspec.MsgspecError, ValueError):  # WireFormatError and UnicodeDecodeError are ValueErrors
                event = None
            if event is not None:
                return event
        return decode(key, value, self.schema, self.max_bytes)

    def _typed(self, key: bytes, value: bytes) -> SessionEvent | None:
        if not value.isascii():
            value.decode()  # skipped fields are not checked as they are read
        message = self._decoder.decode(value)
        if key != message.session_id.encode():
            return None
        ts = _timestamp(message.ts, "ts")
        kind = type(message)
        if kind is self._update:
            return UpdateEvent(message.session_id, message.seq, ts, message.row_id, self._values(message.values))
        if kind is self._snapshot:
            rows = tuple(Row(row.row_id, self._values(row.values)) for row in message.rows)
            return SnapshotEvent(message.session_id, message.seq, ts, rows, message.restart_request)
        if kind is self._delete:
            return DeleteEvent(message.session_id, message.seq, ts, message.row_id)
        return EndEvent(message.session_id, message.seq, ts)

    def _values(self, struct: Any) -> dict[str, Value]:
        found: dict[str, Value] = msgspec.to_builtins(struct)  # renamed, unset columns left out: 1/4 of a dict comp
        for name in self._timestamps:
            if isinstance(found.get(name), str):
                _timestamp(found[name], "")  # type: ignore[arg-type]
        return found


@functools.lru_cache(maxsize=8)
def decoder_for(schema: TableSchema, max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> Decoder:
    """The :class:`Decoder` of ``schema`` (built once per worker: building one defines its structs)."""
    return Decoder(schema, max_bytes)


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _field(document: Mapping[str, Any], name: str, type_: type[Any], expected: str, where: str = "") -> Any:
    path = f"{where}.{name}" if where else name
    if name not in document:
        raise WireFormatError(WireErrorKind.MISSING_FIELD, f"missing field {path!r}", path)
    value = document[name]
    if not isinstance(value, type_):
        message = f"{path} must be {expected}, not {_kind(value)}"
        raise WireFormatError(WireErrorKind.WRONG_TYPE, message, path)
    return value


def _timestamp(text: str, path: str) -> datetime:
    try:
        if _ISO_TIMESTAMP.match(text):
            return datetime.fromisoformat(text)
    except ValueError:
        pass
    message = f"{path} must be ISO-8601 with a UTC offset, got {text!r}"
    raise WireFormatError(WireErrorKind.WRONG_TYPE, message, path)


def _row(item: Any, where: str, schema: TableSchema) -> Row:
    if not isinstance(item, dict):
        message = f"{where} must be an object, not {_kind(item)}"
        raise WireFormatError(WireErrorKind.WRONG_TYPE, message, where)
    return Row(_field(item, "row_id", str, "a string", where), _values(item, "values", schema, where))


def _values(document: Mapping[str, Any], name: str, schema: TableSchema, where: str = "") -> dict[str, Value]:
    raw: dict[str, Any] = _field(document, name, dict, "an object", where)
    prefix = f"{where}.{name}" if where else name
    return {column: _column(raw[column], type_, f"{prefix}.{column}")
            for column, type_ in schema.columns if column in raw}


def _column(value: Any, type_: ColumnType, path: str) -> Value:
    if value is None:
        return None
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if (type_ == "string" and isinstance(value, str)) or (type_ == "boolean" and isinstance(value, bool)):
        return value
    if type_ == "long" and number and isinstance(value, int) and _LONG_MIN <= value <= _LONG_MAX:
        return value
    if type_ == "double" and number and math.isfinite(value):
        return float(value)
    if type_ == "timestamp" and isinstance(value, str):
        _timestamp(value, path)
        return value
    raise WireFormatError(WireErrorKind.WRONG_TYPE, f"{path} must be a {type_}, got {value!r}", path)


def apply_event(table: Mapping[str, dict[str, Value]], event: SessionEvent) -> Table:
    """The session's table after ``event``: snapshot replaces, update merges, delete removes, end clears.

    Pure: ``table`` is not modified (untouched rows are shared with the result). Null values are not
    stored, so a null in an update keeps the previous value, like an absent column.
    """
    if isinstance(event, SnapshotEvent):
        return {row.row_id: {c: v for c, v in row.values.items() if v is not None} for row in event.rows}
    if isinstance(event, EndEvent):
        return {}
    result = dict(table)
    if isinstance(event, DeleteEvent):
        result.pop(event.row_id, None)
    else:
        merged = dict(table.get(event.row_id, {}))
        merged.update((c, v) for c, v in event.values.items() if v is not None)
        result[event.row_id] = merged
    return result
