"""The peer: Quix Streams rebuilding the same sessions into Parquet, written as a Quix user would.

Runs in its own venv (``bench/.quix-venv``: Quix pins ``confluent-kafka<2.13`` and ``pydantic<2.14``), so it
imports nothing from Streamwarden. Run as ``python quix_peer.py`` in the output's parent folder (Quix's file
sink allows only ``[a-zA-Z0-9 ._/]`` in its directory), with the job on stdin (JSON: bootstrap, topics,
group, directory, columns, idle_timeout); prints one JSON line with the counts and the processing time.

Per session (the message key) the state holds the live row ids under ``rows`` and each row's values under
``r:<row_id>``, so an update reads and writes one row, not the whole table. Every applied event emits the
full row image after it, like Streamwarden's ``session_rows``: a snapshot one row per table row, ``end`` and
an empty snapshot one row with a null ``row_id``.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from quixstreams import Application, State, message_context
from quixstreams.sinks.community.file.formats.parquet import ParquetFormat
from quixstreams.sinks.community.file.local import LocalFileSink

Row = dict[str, Any]


class SessionRebuild:
    """The stateful function: one Kafka message in, the changed rows out."""

    def __init__(self) -> None:
        self.messages = 0
        self.first: float | None = None

    def __call__(self, event: dict[str, Any], state: State) -> list[Row]:
        if self.first is None:
            self.first = time.monotonic()
        self.messages += 1
        context = message_context()
        base = {"topic": context.topic, "partition": context.partition, "offset": context.offset,
                "session_id": event["session_id"], "seq": event["seq"]}
        kind = event["type"]
        if kind in ("snapshot", "end"):
            for row_id in state.get("rows", []):
                state.delete(f"r:{row_id}")
            if kind == "end":
                state.delete("rows")
                return [{**base, "op": "end", "row_id": None}]
            rows = {row["row_id"]: {c: v for c, v in row["values"].items() if v is not None} for row in event["rows"]}
            for row_id, values in rows.items():
                state.set(f"r:{row_id}", values)
            state.set("rows", list(rows))
            out = [{**base, "op": "snapshot", "row_id": row_id, **values} for row_id, values in rows.items()]
            return out or [{**base, "op": "snapshot", "row_id": None}]
        row_id = event["row_id"]
        key = f"r:{row_id}"
        current = state.get(key)
        if kind == "delete":
            if current is not None:
                state.delete(key)
                state.set("rows", [r for r in state.get("rows", []) if r != row_id])
            return [{**base, "op": "delete", "row_id": row_id}]
        if current is None:
            current = {}
            state.set("rows", [*state.get("rows", []), row_id])
        current.update((c, v) for c, v in event["values"].items() if v is not None)
        state.set(key, current)
        return [{**base, "op": "upsert", "row_id": row_id, **current}]


def main() -> None:
    job = json.load(sys.stdin)
    app = Application(broker_address=job["bootstrap"], consumer_group=job["group"], auto_offset_reset="earliest",
                      state_dir=job["directory"] + "_state", loglevel="WARNING")
    rebuild = SessionRebuild()
    for name in job["topics"]:
        topic = app.topic(name, value_deserializer="json", key_deserializer="str")
        sdf = app.dataframe(topic).apply(rebuild, stateful=True, expand=True)
        sdf.sink(LocalFileSink(directory=job["directory"], format=ParquetFormat(compression="zstd")))
    started = time.monotonic()
    app.run(timeout=job["idle_timeout"], collect=False)
    done = time.monotonic() - job["idle_timeout"]  # run() returns after that long without a new message
    first = rebuild.first or done
    busy = done - first
    print(json.dumps({"messages": rebuild.messages, "startup_s": round(first - started, 3),
                      "processing_s": round(busy, 3),
                      "msg_per_s": round(rebuild.messages / busy, 1) if busy > 0 else None}), flush=True)


if __name__ == "__main__":
    main()
