"""The Spark side of session reconstruction: a ``transformWithStateInPandas`` processor.

Per session and micro-batch: load the framework meta and the handler's state (one RocksDB value each,
with a TTL = the session timeout), sort the batch's records by (topic, partition, offset) -- rows of a
group arrive after a shuffle, in no particular order -- run :func:`process_session`, store or release
the state, and return applied rows and dead letters in one frame (``kind`` tells them apart).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pandas as pd
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle, TimerValues

from streamwarden.sessions.engine import RawRecord, SessionMeta, SessionPolicy, SessionResult, process_session
from streamwarden.sessions.handler import SessionHandler, load_handler
from streamwarden.sessions.tables import KIND_DEAD, KIND_ROW, operator_output_schema
from streamwarden.wire import TableSchema

INPUT_COLUMNS = ["topic", "partition", "offset", "key", "value", "timestamp"]
_PANDAS_DTYPES = {"timestamp": "timestamp", "double": "float64"}
"""Output dtypes: an all-null column must not become float NaN (Spark rejects pandas extension dtypes)."""


@dataclass(frozen=True)
class SessionJobConfig:
    """Everything the processor needs on an executor (picklable, plain values)."""

    handler_path: str
    table_schema: dict[str, str]
    policy: SessionPolicy
    session_timeout_ms: int


class SessionProcessor(StatefulProcessor):
    """Runs the configured :class:`SessionHandler` over each session, in Kafka order."""

    def __init__(self, config: SessionJobConfig) -> None:
        self.config = config

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handler: SessionHandler[Any] = load_handler(self.config.handler_path)
        self.schema = TableSchema.parse(self.config.table_schema)
        output = operator_output_schema(self.handler.output_columns(self.schema))
        self.columns = output.fieldNames()
        self.dtypes = {f.name: _PANDAS_DTYPES.get(f.dataType.typeName(), "object") for f in output.fields}
        ttl = self.config.session_timeout_ms
        self.meta_state = handle.getValueState("meta", "meta STRING", ttl)
        self.handler_state = handle.getValueState("state", "state BINARY", ttl)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame] | Iterator[Any],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        chunks = list(rows)  # the iterator may yield several chunks
        frame = pd.concat(chunks, ignore_index=True)
        frame = frame.sort_values(["topic", "partition", "offset"], kind="stable")
        stored_meta = self.meta_state.get() if self.meta_state.exists() else None
        meta = SessionMeta.from_json(stored_meta[0]) if stored_meta else SessionMeta()
        stored_state = self.handler_state.get() if self.handler_state.exists() else None
        state = self.handler.decode_state(bytes(stored_state[0])) if stored_state else self.handler.initial_state()
        records = [RawRecord(t, int(p), int(o), k, v, ts.to_pydatetime() if not pd.isna(ts) else None)
                   for t, p, o, k, v, ts in frame[INPUT_COLUMNS].itertuples(index=False, name=None)]
        result = process_session(meta, state, records, handler=self.handler, schema=self.schema,
                                 policy=self.config.policy)
        if result.released:
            self.meta_state.clear()
            self.handler_state.clear()
        else:
            self.meta_state.update((result.meta.to_json(),))
            self.handler_state.update((self.handler.encode_state(result.state),))
        yield self._frame(result)

    def _frame(self, result: SessionResult) -> pd.DataFrame:
        out: list[dict[str, Any]] = []
        for applied in result.rows:
            rec, event = applied.record, applied.event
            out.append({**applied.row, "kind": KIND_ROW, "topic": rec.topic, "partition": rec.partition,
                        "offset": rec.offset, "session_id": event.session_id, "seq": event.seq,
                        "event_ts": event.ts})
        for dead in result.dead:
            rec = dead.record
            out.append({"kind": KIND_DEAD, "topic": rec.topic, "partition": rec.partition, "offset": rec.offset,
                        "key": rec.key, "value": rec.value, "kafka_timestamp": rec.timestamp,
                        "error_class": dead.error_class, "error_message": dead.message})
        frame = pd.DataFrame(out, columns=self.columns)
        for name, dtype in self.dtypes.items():
            column = frame[name]
            if dtype == "timestamp":
                frame[name] = pd.to_datetime(column, utc=True, format="ISO8601")
            elif dtype == "object":
                frame[name] = column.astype(object).where(column.notna(), None)
            else:
                frame[name] = column.astype(dtype)
        return frame

    def close(self) -> None:
        """Nothing to release: the state handles belong to Spark."""
