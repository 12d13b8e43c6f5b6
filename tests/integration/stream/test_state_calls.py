"""Pipelined state calls against Spark's real state server: they read and write what one call at a time does.

A streaming query (file source, one file a batch, real RocksDB state) runs a probe processor whose input
rows are commands: ``put`` and ``drop`` go through :func:`write_states`, ``read`` through
:func:`read_states`, and every read is checked in the same batch against ``getValue`` one key at a time.
More keys than one pipelined chunk, absent keys, removals and overwrites are all in it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyspark.cloudpickle
from pyspark.sql import SparkSession
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle, TimerValues

from streamwarden.stream.sessions.state_calls import CHUNK, pipelining_supported, read_states, write_states

KEYS = 2 * CHUNK + 88  # more than two chunks


class Probe(StatefulProcessor):
    """Applies a batch's commands: reads first (pipelined and one by one), then the writes, pipelined."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.state = handle.getMapState("sessions", "session_id STRING", "meta STRING, state BINARY")

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame] | Iterator[Any],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        commands = pd.concat(list(rows))
        reads = [(k,) for k in commands.loc[commands["op"] == "read", "key"]]
        piped = read_states(self.state, reads)
        single = {k: value for k in reads if (value := self.state.getValue(k)) is not None}
        same = {k: tuple(v) for k, v in piped.items()} == {k: tuple(v) for k, v in single.items()}
        puts = commands[commands["op"] == "put"]
        write_states(self.state, [((k,), (v, v.encode())) for k, v in zip(puts["key"], puts["value"], strict=True)],
                     [(k,) for k in commands.loc[commands["op"] == "drop", "key"]])
        found = json.dumps(sorted([k[0], v[0], bytes(v[1]).decode()] for k, v in piped.items()))
        yield pd.DataFrame({"batch": [int(commands["batch"].iloc[0])],
                            "supported": [pipelining_supported(self.state)], "reads": [len(reads)],
                            "same": [same], "found": [found]})

    def close(self) -> None:
        """Nothing to release."""


pyspark.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import tests


def write_batch(folder: Path, index: int, commands: list[dict[str, str]]) -> None:
    (folder / f"{index:02d}.json").write_text(
        "".join(json.dumps({"group": "g", "batch": index, **c}) + "\n" for c in commands))


def test_pipelined_reads_and_writes_match_one_call_at_a_time(spark: SparkSession, tmp_path: Path) -> None:
    source = tmp_path / "in"
    source.mkdir()
    write_batch(source, 0, [{"op": "put", "key": f"k{i}", "value": f"v{i}"} for i in range(KEYS)])
    write_batch(source, 1, [{"op": "read", "key": f"k{i}"} for i in range(KEYS + 50)]  # 50 never written
                + [{"op": "drop", "key": f"k{i}"} for i in range(100)]
                + [{"op": "put", "key": f"k{i}", "value": f"w{i}"} for i in range(100, 110)])
    write_batch(source, 2, [{"op": "read", "key": f"k{i}"} for i in range(KEYS + 50)])
    frame = (spark.readStream.schema("group STRING, batch INT, op STRING, key STRING, value STRING")
             .option("maxFilesPerTrigger", 1).json(str(source)))
    probed = frame.groupBy("group").transformWithStateInPandas(
        Probe(), "batch INT, supported BOOLEAN, reads LONG, same BOOLEAN, found STRING", "Append", "None")
    query = (probed.writeStream.format("memory").queryName("probe").outputMode("append")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    batches = [row.asDict() for row in spark.sql("SELECT * FROM probe ORDER BY batch").collect()]
    assert [b["reads"] for b in batches] == [0, KEYS + 50, KEYS + 50]
    assert all(b["supported"] and b["same"] for b in batches)
    first, second = (json.loads(b["found"]) for b in batches[1:])
    assert first == sorted([f"k{i}", f"v{i}", f"v{i}"] for i in range(KEYS))
    assert second == sorted([[f"k{i}", f"w{i}", f"w{i}"] for i in range(100, 110)]
                            + [[f"k{i}", f"v{i}", f"v{i}"] for i in range(110, KEYS)])
