"""Packed payloads: Arrow IPC streams with compressed buffers, read back exactly."""

from __future__ import annotations

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]

from streamwarden.stream.ipc import from_ipc, to_ipc


def test_a_payload_is_compressed_and_reads_back_equal() -> None:
    values = [b'{"type":"update","session_id":"s%d","values":{"price":1.5,"status":"open"}}' % i for i in range(5000)]
    table = pa.table({"offset": pa.array(range(5000), pa.int64()), "value": pa.array(values, pa.binary())})
    plain = pa.BufferOutputStream()
    with pa.ipc.new_stream(plain, table.schema) as writer:
        writer.write(table)
    payload = to_ipc(table)
    assert len(payload) * 3 < plain.getvalue().size  # JSON values shrink
    assert from_ipc(payload).equals(table)
    assert from_ipc(to_ipc(table.slice(0, 0))).num_rows == 0
