"""Arrow IPC streams as bytes: how packed rows travel through Spark as one binary value."""

from __future__ import annotations

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]

_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")
"""LZ4 frames: Kafka values (JSON) shrink several times for little CPU, and Spark moves, shuffles and sorts the
payloads as they are (docs/tuning.md)."""


def to_ipc(data: pa.Table | pa.RecordBatch) -> bytes:
    """``data`` as one Arrow IPC stream, its buffers compressed."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, data.schema, options=_OPTIONS) as writer:
        writer.write(data)
    return sink.getvalue().to_pybytes()  # type: ignore[no-any-return]


def from_ipc(payload: bytes) -> pa.Table:
    """The table in one Arrow IPC stream."""
    return pa.ipc.open_stream(pa.py_buffer(payload)).read_all()
