"""The Spark side of session reconstruction: a ``transformWithStateInPandas`` processor.

Sessions are grouped into a fixed number of *buckets* (a hash of the session id), and the processor is
called once per bucket and micro-batch, not once per session: the per-call costs of the API (setting the
grouping key, one pandas frame in, one frame out, each converted to and from Arrow) are paid per bucket.
Each session's framework meta and handler state is one entry of the bucket's ``MapState`` (keyed by
session id, TTL = the session timeout): one read and one write per session touched in the batch.

Per bucket and batch: sort the records by (topic, partition, offset) -- they arrive after a shuffle, in
no particular order -- split them by session in that order, run :func:`process_session` over each
session, store or release its state, and return applied rows and dead letters of all the bucket's
sessions in one frame (``kind`` tells them apart).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pandas as pd
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle, TimerValues

from streamwarden.stream.sessions.engine import RawRecord, SessionMeta, SessionPolicy, SessionResult, process_session
from streamwarden.stream.sessions.handler import SessionHandler, load_handler
from streamwarden.stream.sessions.tables import KIND_DEAD, KIND_ROW, operator_output_schema
from streamwarden.wire import TableSchema

INPUT_COLUMNS = ["topic", "partition", "offset", "key", "value", "timestamp"]
SESSION_KEY, SESSION_BUCKET = "session_key", "session_bucket"
_PANDAS_DTYPES = {"timestamp": "timestamp", "double": "float64"}
"""Output dtypes: an all-null column must not become float NaN (Spark rejects pandas extension dtypes)."""


@dataclass(frozen=True)
class SessionJobConfig:
    """Everything the processor needs on an executor (picklable, plain values)."""

    handler_path: str
    table_schema: dict[str, str]
    policy: SessionPolicy
    session_timeout_ms: int


def _series(values: list[Any], dtype: str) -> pd.Series:
    if dtype == "timestamp":
        return pd.Series(pd.to_datetime(values, utc=True, format="ISO8601"))
    return pd.Series(values, dtype=dtype)


def _records_by_session(frame: pd.DataFrame) -> dict[str, list[RawRecord]]:
    """The bucket's records, split by session id, each list in (topic, partition, offset) order."""
    frame = frame.sort_values(["topic", "partition", "offset"], kind="stable")
    stamps = [None if ts is pd.NaT else ts for ts in frame["timestamp"].array.to_pydatetime()]
    sessions: dict[str, list[RawRecord]] = {}
    for session, topic, partition, offset, key, value, ts in zip(
            frame[SESSION_KEY].tolist(), frame["topic"].tolist(), frame["partition"].tolist(),
            frame["offset"].tolist(), frame["key"].tolist(), frame["value"].tolist(), stamps, strict=True):
        sessions.setdefault(session, []).append(RawRecord(topic, int(partition), int(offset), key, value, ts))
    return sessions


class SessionProcessor(StatefulProcessor):
    """Runs the configured :class:`SessionHandler` over each session of a bucket, in Kafka order."""

    def __init__(self, config: SessionJobConfig) -> None:
        self.config = config

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handler: SessionHandler[Any] = load_handler(self.config.handler_path)
        self.schema = TableSchema.parse(self.config.table_schema)
        output = operator_output_schema(self.handler.output_columns(self.schema))
        self.columns = output.fieldNames()
        self.dtypes = {f.name: _PANDAS_DTYPES.get(f.dataType.typeName(), "object") for f in output.fields}
        self.sessions = handle.getMapState("sessions", "session_id STRING", "meta STRING, state BINARY",
                                           self.config.session_timeout_ms)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame] | Iterator[Any],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        frame = pd.concat(list(rows), ignore_index=True)  # the iterator may yield several chunks
        results = [self._session(session, records) for session, records in _records_by_session(frame).items()]
        yield self._frame(results)

    def _session(self, session: str, records: list[RawRecord]) -> SessionResult:
        """One session's records of this batch: read its state, apply them, store or release the state."""
        stored = self.sessions.getValue((session,))
        meta = SessionMeta.from_json(stored[0]) if stored else SessionMeta()
        state = self.handler.decode_state(bytes(stored[1])) if stored else self.handler.initial_state()
        result = process_session(meta, state, records, handler=self.handler, schema=self.schema,
                                 policy=self.config.policy)
        if result.released:
            if stored:
                self.sessions.removeKey((session,))
        else:
            self.sessions.updateValue((session,), (result.meta.to_json(), self.handler.encode_state(result.state)))
        return result

    def _frame(self, results: list[SessionResult]) -> pd.DataFrame:
        """Column by column (a list of dicts through pandas costs ~4x more per row)."""
        size = sum(len(r.rows) + len(r.dead) for r in results)
        cols: dict[str, list[Any]] = {name: [None] * size for name in self.columns}
        kind, topic, partition, offset = cols["kind"], cols["topic"], cols["partition"], cols["offset"]
        session_id, seq, event_ts = cols["session_id"], cols["seq"], cols["event_ts"]
        boundary, restart_request = cols["boundary"], cols["restart_request"]
        i = 0
        for result in results:
            for applied in result.rows:
                rec, event = applied.record, applied.event
                kind[i], topic[i], partition[i], offset[i] = KIND_ROW, rec.topic, rec.partition, rec.offset
                session_id[i], seq[i], event_ts[i] = event.session_id, event.seq, event.ts
                boundary[i] = None if applied.boundary is None else applied.boundary.value
                restart_request[i] = applied.restart_request
                for name, value in applied.row.items():
                    cols[name][i] = value
                i += 1
            for dead in result.dead:
                rec = dead.record
                kind[i], topic[i], partition[i], offset[i] = KIND_DEAD, rec.topic, rec.partition, rec.offset
                cols["key"][i], cols["value"][i], cols["kafka_timestamp"][i] = rec.key, rec.value, rec.timestamp
                cols["error_class"][i], cols["error_message"][i] = dead.error_class, dead.message
                i += 1
        return pd.DataFrame({name: _series(values, self.dtypes[name]) for name, values in cols.items()})

    def close(self) -> None:
        """Nothing to release: the state handles belong to Spark."""
