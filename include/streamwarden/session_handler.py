"""The session handler: the interface a user implements to rebuild sessions, and how the job loads one.


A handler turns one session's events, in order, into output rows, keeping a state of its own type::

    class MyHandler:
        state_version = 1
        state_schema = "count: int"

        def output_columns(self, schema: TableSchema) -> list[tuple[str, ColumnType]]:
            return [("events_so_far", "long")]

        def initial_state(self) -> int:
            return 0

        def on_event(self, state: int, event: SessionEvent) -> tuple[int, list[dict[str, Value]]]:
            return state + 1, [{"events_so_far": state + 1}]

        def encode_state(self, state: int) -> bytes: ...
        def decode_state(self, data: bytes) -> int: ...

The job calls ``on_event`` in (partition, offset) order, only for events that passed the integrity tier,
and adds ``topic, partition, offset, session_id, seq, event_ts, boundary, restart_request`` to every output
row (``boundary``: ``start``, ``snapshot``, ``resync`` or ``end`` on the rows of those events, else null;
``restart_request``: the restart request a snapshot answers). State is stored as
the handler's own bytes (JSON, msgspec...; never pickle: the checkpoint outlives the code). An ``end``
event releases the state after ``on_event``. To keep the offset accounting exact (every consumed offset
in ``session_rows`` or ``quarantine``), a handler should emit at least one row per event.

The layout a handler's state is stored in is pinned with the checkpoint (:mod:`streamwarden.runfiles.handler_pin`).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any, ClassVar, Protocol, TypeVar, runtime_checkable

from streamwarden.failures import ConfigError
from streamwarden.wire import COLUMN_TYPES, ColumnType, SessionEvent, TableSchema, Value

FRAMEWORK_COLUMNS = frozenset({
    "kind", "topic", "partition", "offset", "session_id", "seq", "event_ts", "boundary",  # added to every
    "restart_request",  # output row
    "key", "value", "kafka_timestamp", "error_class", "error_message",  # dead letters (quarantine)
    "source_topic", "event_date", "event_hour",  # output folder partitioning
})
"""Column names the framework owns: a handler's output columns may not reuse them."""
S = TypeVar("S")
OutputRow = dict[str, Value]


@runtime_checkable
class SessionHandler(Protocol[S]):
    """Rebuilds whatever a session means to you from its ordered events."""

    state_version: ClassVar[int]
    state_schema: ClassVar[str]

    def output_columns(self, schema: TableSchema) -> Sequence[tuple[str, ColumnType]]:
        """Typed columns of the rows ``on_event`` returns (the framework adds the Kafka/session columns)."""
        ...

    def initial_state(self) -> S:
        """State of a session before its first event."""
        ...

    def on_event(self, state: S, event: SessionEvent) -> tuple[S, Sequence[OutputRow]]:
        """Apply one event; return the new state and the output rows it causes."""
        ...

    def encode_state(self, state: S) -> bytes:
        """Serialise the state (stable across restarts of the same ``state_version``)."""
        ...

    def decode_state(self, data: bytes) -> S:
        """Inverse of :meth:`encode_state`."""
        ...


def load_handler(path: str) -> SessionHandler[Any]:
    """Instantiate ``package.module:ClassName``; a clear CONFIG error when it is not a handler."""
    module_name, _, class_name = path.partition(":")
    try:
        handler_class = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(f"session handler {path!r} cannot be loaded: {exc}") from exc
    missing = [name for name in ("state_version", "state_schema", "output_columns", "initial_state",
                                 "on_event", "encode_state", "decode_state") if not hasattr(handler_class, name)]
    if missing:
        raise ConfigError(f"session handler {path!r} lacks {', '.join(missing)}")
    try:
        return handler_class()  # type: ignore[no-any-return]
    except TypeError as exc:
        raise ConfigError(f"session handler {path!r} must be constructible without arguments: {exc}") from exc


def load_checked_handler(path: str,
                         schema: TableSchema) -> tuple[SessionHandler[Any], Sequence[tuple[str, ColumnType]]]:
    """Load the handler at ``path`` and check its output columns for ``schema`` (CONFIG errors, no Spark)."""
    handler = load_handler(path)
    return handler, checked_output_columns(handler, schema, path)


def checked_output_columns(handler: SessionHandler[Any], schema: TableSchema,
                           path: str = "") -> Sequence[tuple[str, ColumnType]]:
    """The handler's output columns for ``schema``; a CONFIG error when one reuses a framework column, is
    named twice or has an unknown type (found before Spark starts, not as a BUG inside a batch)."""
    where = f"session handler {path or type(handler).__qualname__!r}"
    columns = list(handler.output_columns(schema))
    names = [name for name, _ in columns]
    clashes = sorted(FRAMEWORK_COLUMNS & set(names))
    if clashes:
        source = "STREAMWARDEN_TABLE_SCHEMA or the handler"
        raise ConfigError(f"{where}: output columns {clashes} reuse framework columns; rename them in {source} "
                          f"(framework columns: {', '.join(sorted(FRAMEWORK_COLUMNS))})")
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ConfigError(f"{where}: output columns {twice} appear twice (a table schema column named like "
                          "one the handler adds?)")
    unknown = [f"{name}: {type_!r}" for name, type_ in columns if type_ not in COLUMN_TYPES]
    if unknown:
        raise ConfigError(f"{where}: output columns of unknown type ({', '.join(unknown)}); allowed: "
                          f"{', '.join(COLUMN_TYPES)}")
    return columns
