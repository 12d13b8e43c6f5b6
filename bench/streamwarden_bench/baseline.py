"""The baseline: one process, confluent-kafka consumer -> JSON parse -> pyarrow Parquet writer. No Spark, no state.

Run as ``python -m streamwarden_bench.baseline OUT_DIR`` with the job on stdin (JSON: bootstrap, starts,
ends); prints one JSON line with the counts and the processing time. Each row is one message: the Kafka
coordinates, the parsed header fields (``type``, ``session_id``, ``seq``, ``ts``, ``row_id``) and the raw
key and value, from which the tables can be rebuilt (that is how its output is verified).
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq
from confluent_kafka import Consumer, Message, TopicPartition

Offsets = dict[str, dict[int, int]]
SCHEMA = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
    ("kafka_timestamp_ms", pa.int64()), ("type", pa.string()), ("session_id", pa.string()),
    ("seq", pa.int64()), ("ts", pa.string()), ("row_id", pa.string()), ("key", pa.binary()), ("value", pa.binary()),
])
CHUNK = 100_000  # messages per Parquet file


def consume_ranges(bootstrap: str, starts: Offsets, ends: Offsets, batch: int = 10_000) -> Iterator[list[Message]]:
    """Messages of ``[starts, ends)`` per partition (start 0 when absent), in fetch order, in lists."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "enable.partition.eof": False,
                         "fetch.max.bytes": 64 * 2**20, "max.partition.fetch.bytes": 16 * 2**20,
                         "fetch.queue.backoff.ms": 5})  # as the job's reader (range_reader.FETCH_QUEUE_BACKOFF_MS)
    pending = {(t, p): end for t, parts in ends.items() for p, end in parts.items()
               if end > starts.get(t, {}).get(p, 0)}
    consumer.assign([TopicPartition(t, p, starts.get(t, {}).get(p, 0)) for t, p in pending])
    try:
        while pending:
            messages = consumer.consume(batch, timeout=1.0)
            kept = []
            for message in messages:
                if message.error() is not None:
                    raise RuntimeError(f"consume failed: {message.error()}")
                key, offset = (str(message.topic()), int(message.partition() or 0)), int(message.offset() or 0)
                end = pending.get(key)
                if end is None or offset >= end:
                    continue
                kept.append(message)
                if offset + 1 >= end:
                    del pending[key]
            if kept:
                yield kept
    finally:
        consumer.close()


def _columns(messages: list[Message], columns: dict[str, list[Any]]) -> None:
    decode = msgspec.json.decode
    for message in messages:
        value = message.value() or b""
        document = decode(value)
        columns["topic"].append(message.topic())
        columns["partition"].append(message.partition())
        columns["offset"].append(message.offset())
        columns["kafka_timestamp_ms"].append(message.timestamp()[1])
        columns["type"].append(document["type"])
        columns["session_id"].append(document["session_id"])
        columns["seq"].append(document["seq"])
        columns["ts"].append(document["ts"])
        columns["row_id"].append(document.get("row_id"))
        columns["key"].append(message.key())
        columns["value"].append(value)


def run(bootstrap: str, ends: Offsets, out: Path) -> dict[str, Any]:
    """Land every message of ``[0, ends)`` as Parquet under ``out``; returns counts and timings."""
    out.mkdir(parents=True, exist_ok=True)
    columns: dict[str, list[Any]] = {name: [] for name in SCHEMA.names}
    count = files = 0
    first = None

    def flush() -> None:
        nonlocal files
        table = pa.table({name: columns[name] for name in SCHEMA.names}, schema=SCHEMA)
        pq.write_table(table, out / f"part-{files:05d}.parquet", compression="zstd")
        files += 1
        for values in columns.values():
            values.clear()

    started = time.monotonic()
    for messages in consume_ranges(bootstrap, {}, ends):
        first = first or time.monotonic()
        _columns(messages, columns)
        count += len(messages)
        if len(columns["offset"]) >= CHUNK:
            flush()
    if columns["offset"]:
        flush()
    done = time.monotonic()
    busy = done - (first or done)
    return {"messages": count, "files": files, "startup_s": round((first or done) - started, 3),
            "processing_s": round(busy, 3), "msg_per_s": round(count / busy, 1) if busy else None}


def main() -> None:
    job = json.load(sys.stdin)
    ends = {t: {int(p): e for p, e in parts.items()} for t, parts in job["ends"].items()}
    print(json.dumps(run(job["bootstrap"], ends, Path(sys.argv[1]))), flush=True)


if __name__ == "__main__":
    main()
