"""The Spark side of session reconstruction: a ``transformWithStateInPandas`` processor.

Sessions are grouped into a fixed number of *buckets* (a hash of the session id), and the processor is
called once per bucket and micro-batch, not once per session: the per-call costs of the API (setting the
grouping key, one pandas frame in, one frame out, each converted to and from Arrow) are paid per bucket.
Each session's framework meta and handler state is kept in the bucket's state (:mod:`.session_store`: one
entry per session, or sessions in slots, as the checkpoint was started): the reads of the sessions a batch
touches, and their writes (or removals, for ended sessions), go to the state server pipelined.

Per bucket and batch: read the bucket's packed records (:mod:`.packing`) in (topic, partition, offset)
order -- they arrive after a shuffle, in no particular order -- split them by session in that order, run
:func:`process_session` over each session, store or release the sessions' states, and return the applied
rows and the dead letters of the bucket's sessions as packed rows, one per kind (``kind`` tells them apart)
and chunk of about :data:`OUTPUT_CHUNK_ROWS` rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from operator import itemgetter
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle, TimerValues

from streamwarden.session_handler import OutputRow, SessionHandler, load_handler
from streamwarden.stream.sessions.engine import RawRecord, SessionMeta, SessionPolicy, SessionResult, process_session
from streamwarden.stream.sessions.packing import (
    INPUT_COLUMNS,
    PACKED_RECORDS,
    SESSION_KEY,
    kafka_order,
    pack_rows,
    unpack_records,
)
from streamwarden.stream.sessions.session_store import Stored, open_store
from streamwarden.stream.sessions.tables import KIND_DEAD, KIND_ROW, quarantine_schema, session_rows_schema
from streamwarden.stream.worker_gc import collections_paused, spread_collections
from streamwarden.wire import TableSchema


@dataclass(frozen=True)
class SessionJobConfig:
    """Everything the processor needs on an executor (picklable, plain values)."""

    handler_path: str
    table_schema: dict[str, str]
    policy: SessionPolicy
    session_timeout_ms: int
    session_slots: int = 0  # the checkpoint's state layout (sessions.session_store); 0: one entry per session
    slot_codec: str = ""  # how the checkpoint's slots are compressed; "": plain
    slot_expiry: str = ""  # how they expire; "": Spark's TTL (runfiles.handler_pin.SLOT_EXPIRY)


OUTPUT_CHUNK_ROWS = 8_192
"""The operator emits a bucket's output in chunks of about this many rows (applied rows and dead letters), so
that a worker holds one chunk's rows at a time, not the bucket's (a batch of 10-row snapshots over 200k sessions
yields ~60k rows per bucket; docs/tuning.md)."""


def _records_by_session(records: pa.Table, order: np.ndarray) -> dict[str, list[RawRecord]]:
    """The bucket's records split by session id, each list in ``order`` (Kafka's, :func:`.packing.kafka_order`)."""
    sessions: dict[str, list[RawRecord]] = {}
    columns = [records.column(name).to_pylist() for name in (SESSION_KEY, *INPUT_COLUMNS[:-1])]
    # naive UTC datetimes through numpy: pyarrow's own conversion to zoned ones costs ~10x more per record
    columns.append(records.column(INPUT_COLUMNS[-1]).to_numpy().astype(object).tolist())
    positions = order.tolist()
    in_order = itemgetter(*positions) if len(positions) > 1 else lambda values: [values[i] for i in positions]
    for session, topic, partition, offset, key, value, ts in zip(*map(in_order, columns), strict=True):
        sessions.setdefault(session, []).append(RawRecord(topic, partition, offset, key, value, ts))
    return sessions


def _array(values: list[Any], type_: pa.DataType) -> pa.Array:
    """One output column; a handler's timestamps may be ISO-8601 strings (as the wire carries them)."""
    if pa.types.is_timestamp(type_):
        values = [datetime.fromisoformat(v) if isinstance(v, str) else v for v in values]
    return pa.array(values, type_)


class SessionProcessor(StatefulProcessor):
    """Runs the configured :class:`SessionHandler` over each session of a bucket, in Kafka order."""

    def __init__(self, config: SessionJobConfig) -> None:
        self.config = config

    def init(self, handle: StatefulProcessorHandle) -> None:
        spread_collections()
        self.handler: SessionHandler[Any] = load_handler(self.config.handler_path)
        self.schema = TableSchema.parse(self.config.table_schema)
        columns = self.handler.output_columns(self.schema)
        self.handler_columns = [name for name, _ in columns]
        self.rows_schema = to_arrow_schema(session_rows_schema(columns), timezone="UTC")
        self.dead_schema = to_arrow_schema(quarantine_schema(), timezone="UTC")
        self.store = open_store(handle, self.config.session_slots, self.config.session_timeout_ms,
                                self.config.slot_codec, spark_ttl=not self.config.slot_expiry)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame] | Iterator[Any],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        with collections_paused():  # a bucket's records, events and rows hold no cycles (worker_gc)
            yield from self._bucket(rows, timerValues)

    def _bucket(self, rows: Iterator[pd.DataFrame] | Iterator[Any], timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        """One bucket's records of this batch: sessions run, states stored, output in chunks."""
        payloads = [payload for frame in rows for payload in frame[PACKED_RECORDS].tolist()]
        records = unpack_records(payloads)
        by_session = _records_by_session(records, kafka_order(records))
        now_ms = timerValues.getCurrentProcessingTimeInMs()
        stored = self.store.read(list(by_session), now_ms)
        changes: dict[str, Stored | None] = {}
        pending: list[SessionResult] = []
        pending_rows = 0
        for session, records in by_session.items():
            result = self._session(session, records, stored.get(session))
            if not result.released or session in stored:
                changes[session] = None if result.released else (result.meta.to_json(),
                                                                  self.handler.encode_state(result.state))
            result.state = None  # stored above: only its rows wait for the output
            pending.append(result)
            pending_rows += result.rows + len(result.dead)
            if pending_rows >= OUTPUT_CHUNK_ROWS:
                yield self._packed(pending)
                pending, pending_rows = [], 0
        self.store.write(changes, now_ms)
        if pending_rows:
            yield self._packed(pending)

    def _packed(self, results: list[SessionResult]) -> pd.DataFrame:
        """The applied rows and dead letters of ``results`` as the operator's output rows (one per kind present)."""
        return pd.DataFrame([pack_rows(kind, batch) for kind, batch in ((KIND_ROW, self._rows(results)),
                                                                        (KIND_DEAD, self._dead(results)))
                             if batch.num_rows], columns=["kind", "rows", "payload"])

    def _session(self, session: str, records: list[RawRecord], stored: Stored | None) -> SessionResult:
        """One session's records of this batch, on its stored meta and state (the caller stores the result's)."""
        meta = SessionMeta.from_json(stored[0]) if stored else SessionMeta()
        state = self.handler.decode_state(stored[1]) if stored else self.handler.initial_state()
        return process_session(meta, state, records, handler=self.handler, schema=self.schema,
                               policy=self.config.policy)

    def _rows(self, results: list[SessionResult]) -> pa.RecordBatch:
        """The applied rows of the bucket's sessions, column by column (``session_rows``' schema): the event's
        columns built once per event and repeated for each of its rows, the handler's from its rows' dicts."""
        applied = [event for result in results for event in result.applied]
        events = [a.event for a in applied]
        records = [a.record for a in applied]
        per_event: list[list[Any]] = [
            [r.topic for r in records], [r.partition for r in records], [r.offset for r in records],
            [e.session_id for e in events], [e.seq for e in events], [e.ts for e in events],
            [a.boundary for a in applied],  # a StrEnum is a str to Arrow
            [a.restart_request for a in applied]]
        repeat = pa.array(np.repeat(np.arange(len(applied)), [len(a.rows) for a in applied]), pa.int64())
        framework = list(self.rows_schema)[:len(per_event)]  # the handler's columns follow
        columns = [_array(column, field.type).take(repeat) for column, field in zip(per_event, framework, strict=True)]
        columns += self._handler_columns([row for a in applied for row in a.rows])
        return pa.RecordBatch.from_arrays(columns, schema=self.rows_schema)

    def _handler_columns(self, rows: list[OutputRow]) -> list[pa.Array]:
        """The handler's columns of ``rows``: converted as one struct array in a single pass over the dicts, but
        for timestamp columns, which a handler may give as ISO-8601 strings (:func:`_array`)."""
        handler_fields = [self.rows_schema.field(name) for name in self.handler_columns]
        plain = [f for f in handler_fields if not pa.types.is_timestamp(f.type)]
        converted = dict(zip([f.name for f in plain], pa.array(rows, pa.struct(plain)).flatten(), strict=True))
        return [converted[f.name] if f.name in converted else _array([row.get(f.name) for row in rows], f.type)
                for f in handler_fields]

    def _dead(self, results: list[SessionResult]) -> pa.RecordBatch:
        """The dead letters of the bucket's sessions (``quarantine``'s schema)."""
        dead = [letter for result in results for letter in result.dead]
        columns: list[list[Any]] = [[d.record.topic for d in dead], [d.record.partition for d in dead],
                   [d.record.offset for d in dead], [d.record.key for d in dead], [d.record.value for d in dead],
                   [d.record.timestamp for d in dead], [d.error_class for d in dead], [d.message for d in dead]]
        return pa.RecordBatch.from_arrays([_array(column, field.type) for column, field in
                                           zip(columns, self.dead_schema, strict=True)], schema=self.dead_schema)

    def close(self) -> None:
        """Nothing to release: the state handles belong to Spark."""
