"""The built-in handler: rebuilds each session's table and emits the full row image after every change."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

import msgspec

from streamwarden.session_handler import OutputRow
from streamwarden.wire import (
    ColumnType,
    DeleteEvent,
    EndEvent,
    SessionEvent,
    SnapshotEvent,
    TableSchema,
    Value,
)

SessionTable = dict[str, dict[str, Value]]
_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder(dict[str, dict[str, str | int | float | bool | None]])


class TableReconstruction:
    """``op`` is snapshot | upsert | delete | end; a snapshot yields one row per table row.

    An empty snapshot and ``end`` yield one row with a null ``row_id``, so every applied event has a row.
    Columns absent from an update (or null) keep their previous value.
    """

    handler_name: ClassVar[str] = "streamwarden.sessions.table_handler:TableReconstruction"  # its first home
    state_version: ClassVar[int] = 1
    state_schema: ClassVar[str] = "json object: row_id -> {column: value}"

    def output_columns(self, schema: TableSchema) -> Sequence[tuple[str, ColumnType]]:
        return [("op", "string"), ("row_id", "string"), *schema.columns]

    def initial_state(self) -> SessionTable:
        return {}

    def on_event(self, state: SessionTable, event: SessionEvent) -> tuple[SessionTable, list[OutputRow]]:
        if isinstance(event, SnapshotEvent):
            table: SessionTable = {row.row_id: _present(row.values) for row in event.rows}
            rows: list[OutputRow] = [{"op": "snapshot", "row_id": row_id, **values} for row_id, values in table.items()]
            return table, rows or [{"op": "snapshot", "row_id": None}]
        if isinstance(event, EndEvent):
            return {}, [{"op": "end", "row_id": None}]
        if isinstance(event, DeleteEvent):
            state.pop(event.row_id, None)
            return state, [{"op": "delete", "row_id": event.row_id}]
        row = state.setdefault(event.row_id, {})
        values = event.values
        row.update(values if None not in values.values() else _present(values))
        return state, [{"op": "upsert", "row_id": event.row_id, **row}]

    def encode_state(self, state: SessionTable) -> bytes:
        return _ENCODER.encode(state)

    def decode_state(self, data: bytes) -> SessionTable:
        return _DECODER.decode(data)


def _present(values: Mapping[str, Value]) -> dict[str, Value]:
    """A copy of ``values`` without the nulls (a null keeps the previous value); the common case, no null, is
    found by a C scan and copied in C."""
    if None in values.values():
        return {c: v for c, v in values.items() if v is not None}
    return dict(values)
