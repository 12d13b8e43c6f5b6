"""Reading a table through its Delta log: the dataset of one version finds every row a filter asks for."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import duckdb
import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.compute as pc  # type: ignore[import-untyped, unused-ignore]
import pyarrow.parquet as pq  # type: ignore[import-untyped, unused-ignore]
from deltalake import DeltaTable
from deltalake.transaction import AddAction

from streamwarden.settings import load_settings
from streamwarden.tables.location import QUARANTINE
from streamwarden.tables.reading import read
from streamwarden.tables.statistics import file_statistics

SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                    ("error_class", pa.string()), ("source_topic", pa.string())])


def test_a_filter_on_a_column_without_statistics_finds_its_rows(tmp_path: Path) -> None:
    """Files committed with statistics of the offset columns only (as the sink wrote them before): deltalake
    1.6.6's own dataset guarantees ``error_class >= null`` for them and skips both files on any filter of it."""
    settings = load_settings(home=tmp_path / "home", output_root=tmp_path / "out")
    root = tmp_path / "out" / QUARANTINE
    DeltaTable.create(str(root), SCHEMA, partition_by=["source_topic"])
    actions = []
    for part, classes in enumerate((["SEQUENCE_GAP", "INVALID_JSON"], ["RESYNC_SKIPPED", "SEQUENCE_GAP"])):
        relative = f"source_topic=t/part-{part}.parquet"
        (root / "source_topic=t").mkdir(exist_ok=True)
        pq.write_table(pa.table({"topic": ["t", "t"], "partition": pa.array([part, part], pa.int32()),
                                 "offset": pa.array([0, 1], pa.int64()), "error_class": classes}), root / relative)
        actions.append(AddAction(relative, os.path.getsize(root / relative), {"source_topic": "t"},
                                 int(time.time() * 1000), True, json.dumps(file_statistics(root / relative))))
    table = DeltaTable(str(root))
    table.create_write_transaction(actions, mode="append", schema=table.schema(), partition_by=["source_topic"])
    gaps = pc.field("error_class") == "SEQUENCE_GAP"
    assert DeltaTable(str(root)).to_pyarrow_dataset().to_table(filter=gaps).num_rows == 0, \
        "deltalake's dataset no longer prunes wrongly: fixed upstream? (docs/delta-rs-behaviour.md)"
    rows = read(settings, QUARANTINE)
    assert rows.to_table(filter=gaps).to_pydict() == {"topic": ["t", "t"], "partition": [0, 1], "offset": [0, 1],
                                                       "error_class": ["SEQUENCE_GAP"] * 2, "source_topic": ["t"] * 2}
    with duckdb.connect() as con:
        con.register("dead", rows)
        assert con.execute("SELECT count(*) FROM dead WHERE error_class IN ('SEQUENCE_GAP', 'RESYNC_SKIPPED') "
                           "AND source_topic = 't'").fetchone() == (3,)
