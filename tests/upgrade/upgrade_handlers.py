"""Session handlers of the upgrade tests, importable by the stream's processes (``tests/upgrade`` on PYTHONPATH).

Each keeps or breaks the built-in handler's state layout on purpose: the fingerprint is its ``handler_name``,
``state_version`` and ``state_schema``, all inherited here unless changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from streamwarden.session_handler import OutputRow
from streamwarden.stream.sessions.table_handler import SessionTable, TableReconstruction
from streamwarden.wire import ColumnType, SessionEvent, TableSchema

TAG = "v2"


class TaggedReconstruction(TableReconstruction):
    """The built-in handler, same state layout, one more output column: ``release_tag``."""

    def output_columns(self, schema: TableSchema) -> Sequence[tuple[str, ColumnType]]:
        return [*super().output_columns(schema), ("release_tag", "string")]

    def on_event(self, state: SessionTable, event: SessionEvent) -> tuple[SessionTable, list[OutputRow]]:
        state, rows = super().on_event(state, event)
        return state, [{**row, "release_tag": TAG} for row in rows]


class FailingReconstruction(TaggedReconstruction):
    """Same layout and columns as :class:`TaggedReconstruction`, but every event raises: every batch fails."""

    def on_event(self, state: SessionTable, event: SessionEvent) -> tuple[SessionTable, list[OutputRow]]:
        raise RuntimeError(f"release v3 cannot apply {type(event).__name__} of session {event.session_id}")


class ChangedLayout(TableReconstruction):
    """A new state encoding: another ``state_version`` (its state could not be read from the checkpoint)."""

    state_version: ClassVar[int] = 2


class DroppedColumns(TableReconstruction):
    """Same state layout, but without the table schema's columns (a drop)."""

    def output_columns(self, schema: TableSchema) -> Sequence[tuple[str, ColumnType]]:
        return [("op", "string"), ("row_id", "string")]
