"""Packed records and rows through the stateful operator, and the executors' Parquet files, against Spark.

The executors' pyarrow writers (``sink.batch_files``: the session job's packed output, the records pipeline's
rows) replace Spark's own Parquet writer: their files must land in the folders Spark would use, hold the rows
Spark would write, and commit through the same Delta sink. Real Spark (local), real Delta tables, the real
filesystem.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.parquet as pq  # type: ignore[import-untyped, unused-ignore]
import pytest
from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema

from streamwarden.failures import IntegrityError
from streamwarden.settings import MAX_SESSION_BUCKETS
from streamwarden.stream.batch_writer import ArrowTable, DeltaBatchWriter, PackedWrites, RowWrites
from streamwarden.stream.ipc import to_ipc
from streamwarden.stream.pipeline import StateLayout, bucket_label
from streamwarden.stream.sessions.packing import (
    PACKED_OUTPUT_SCHEMA,
    SESSION_BUCKET,
    kafka_order,
    pack_by_bucket,
    session_bucket,
    unpack_records,
    with_session_buckets,
)
from streamwarden.stream.sessions.tables import KIND_DEAD, KIND_ROW, quarantine_schema
from streamwarden.stream.sink import batch_files
from streamwarden.stream.sink.batch_files import (
    FOLDER_COLUMNS,
    HIVE_NULL,
    BatchFiles,
    PackedFiles,
    excluding,
    folder_runs,
    with_folder_schema,
)
from streamwarden.stream.sink.delta_sink import DeltaSink
from streamwarden.stream.source.schema import ARROW_SCHEMA
from streamwarden.tables.location import QUARANTINE, SESSION_ROWS, TableLocation
from streamwarden.tables.ranges import TopicPartitionInterval

DEAD_ARROW = to_arrow_schema(quarantine_schema(), timezone="UTC")
START = datetime(2026, 11, 24, 22, 59, 58, tzinfo=UTC)


def dead_rows(topic: str, partition: int, offsets: range, *, null_time_every: int = 0) -> pa.RecordBatch:
    """Quarantine rows (the smallest table schema) crossing an hour and a day boundary."""
    times = [None if null_time_every and i % null_time_every == 0 else START + timedelta(seconds=i)
             for i in range(len(offsets))]
    return pa.RecordBatch.from_arrays([
        pa.array([topic] * len(offsets), pa.string()), pa.array([partition] * len(offsets), pa.int32()),
        pa.array(list(offsets), pa.int64()), pa.array([b"k%d" % o for o in offsets], pa.binary()),
        pa.array([b"{" for _ in offsets], pa.binary()), pa.array(times, pa.timestamp("us", tz="UTC")),
        pa.array(["INVALID_JSON"] * len(offsets), pa.string()), pa.array([f"bad {o}" for o in offsets], pa.string()),
    ], schema=DEAD_ARROW)


DEAD_TABLE = ArrowTable(KIND_DEAD, "kafka_timestamp")
DEAD_ONLY = PackedWrites({QUARANTINE: DEAD_TABLE}, "zstd")


def packed_frame(spark: SparkSession, batches: list[pa.RecordBatch],  # type: ignore[no-untyped-def]
                 declared: int | None = None):
    """The operator's packed output: one row per batch (a bucket's dead letters), and one row of another kind;
    ``declared`` overrides the rows the first batch's row declares."""
    rows = [(KIND_DEAD, b.num_rows, to_ipc(b)) for b in batches]
    if declared is not None:
        rows[0] = (KIND_DEAD, declared, rows[0][2])
    rows.append((KIND_ROW, 1, b"not read by the quarantine writer"))
    return spark.createDataFrame(rows, PACKED_OUTPUT_SCHEMA).repartition(3)


def table_rows(path: Path) -> list[tuple[object, ...]]:
    table = DeltaTable(str(path)).to_pyarrow_table()
    names = [f.name for f in DEAD_ARROW] + [c.name for c in FOLDER_COLUMNS.values()]
    return sorted(zip(*(table[name].to_pylist() for name in names), strict=True), key=lambda r: (r[0], r[1], r[2]))


def written_folders(path: Path) -> list[str]:
    """The folders under the batch folder that hold data files ("" for the batch folder itself)."""
    return sorted("/".join(p.parent.relative_to(path).parts[1:]) for p in path.glob("batch-*/**/*.parquet"))


def spark_writes(frame: DataFrame, partition_by: list[str], write_dir: str) -> None:
    """What Spark's own Parquet writer makes of the rows, with the folder columns as Spark's ``date_format``
    gives them: the layout the executors' pyarrow writers must match."""
    folders = frame.select("*", *(
        (F.col("topic") if column.spark_format is None else F.date_format("kafka_timestamp", column.spark_format))
        .alias(column.name) for column in FOLDER_COLUMNS.values()))
    writer = folders.write.mode("overwrite").option("compression", "zstd")
    (writer.partitionBy(*partition_by) if partition_by else writer).parquet(write_dir)


@pytest.mark.parametrize("partition_by", [("topic", "date", "hour"), ("date",), ()])
def test_the_pyarrow_writers_hold_what_sparks_writer_writes_in_the_same_folders(
        spark: SparkSession, tmp_path: Path, partition_by: tuple[str, ...]) -> None:
    batches = [dead_rows("sites-a", 0, range(0, 40), null_time_every=7), dead_rows("sites-b", 3, range(100, 130)),
               dead_rows("sites-a", 1, range(5, 9))]
    rows = spark.createDataFrame(pa.Table.from_batches(batches).to_pandas(), quarantine_schema()).repartition(2)
    folders = [FOLDER_COLUMNS[c].name for c in partition_by]
    outcomes = {}
    for name in ("packed", "rows", "spark"):
        sink = DeltaSink(TableLocation(QUARANTINE, tmp_path / name, {}), with_folder_schema(DEAD_ARROW), folders)
        plan = sink.plan({"sites-a": {0: (0, 40), 1: (5, 9)}, "sites-b": {3: (100, 130)}}, 0, "q")
        if name == "packed":
            DEAD_ONLY(packed_frame(spark, batches), [(sink, plan)])
        elif name == "rows":
            RowWrites(DEAD_TABLE, "zstd")(rows, [(sink, plan)])
        else:
            spark_writes(rows, folders, plan.write_dir)
        result = sink.commit(plan)
        assert result.rows == 74
        outcomes[name] = (table_rows(tmp_path / name), written_folders(tmp_path / name))
    for name in ("packed", "rows"):
        assert outcomes[name][0] == outcomes["spark"][0]  # the same rows, folder columns included (nulls, hours, days)
        assert sorted(set(outcomes[name][1])) == sorted(set(outcomes["spark"][1]))  # the same folders
    if "date" in partition_by:
        assert any(HIVE_NULL in folder for folder in outcomes["rows"][1])


def test_a_replay_leaves_out_the_committed_offsets_and_replaces_an_earlier_attempt(
        spark: SparkSession, tmp_path: Path) -> None:
    sink = DeltaSink(TableLocation(QUARANTINE, tmp_path, {}), with_folder_schema(DEAD_ARROW), ["source_topic"])
    first = sink.plan({"sites-a": {0: (0, 10)}}, 0, "q")
    DEAD_ONLY(packed_frame(spark, [dead_rows("sites-a", 0, range(0, 10))]), [(sink, first)])
    sink.commit(first)
    replay = sink.plan({"sites-a": {0: (5, 20)}}, 1, "q")  # 5-10 committed already
    assert replay.already_committed == {"sites-a": {0: [(5, 10)]}}
    stale = Path(replay.write_dir) / "source_topic=sites-a" / "part-00099.zstd.parquet"
    stale.parent.mkdir(parents=True)
    pq.write_table(pa.Table.from_batches([dead_rows("sites-a", 0, range(10, 12))]), stale)  # an earlier attempt's
    DEAD_ONLY(packed_frame(spark, [dead_rows("sites-a", 0, range(5, 20))]), [(sink, replay)])
    assert not stale.exists()
    assert sink.commit(replay).rows == 10
    offsets = [row[2] for row in table_rows(tmp_path)]
    assert offsets == list(range(0, 20))  # every offset once


def test_the_batch_writer_refuses_files_that_do_not_hold_the_declared_rows(
        spark: SparkSession, tmp_path: Path) -> None:
    sink = DeltaSink(TableLocation(QUARANTINE, tmp_path, {}), with_folder_schema(DEAD_ARROW), [])
    plan = sink.plan({"sites-a": {0: (0, 10)}}, 0, "q")
    frame = packed_frame(spark, [dead_rows("sites-a", 0, range(0, 10))], declared=11)
    with pytest.raises(IntegrityError, match="hold 10 rows, the batch made 11"):
        DEAD_ONLY(frame, [(sink, plan)])
    assert sink.table.version() == 0  # nothing committed


def test_one_job_writes_every_table_and_a_table_without_rows_commits_only_offsets(
        spark: SparkSession, tmp_path: Path) -> None:
    """The session job's batch: rows and quarantine from one evaluation; a table of no rows gets no files."""
    checkpoint = tmp_path / "checkpoint"  # batch 1 reads sites-a[0] 0-10
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "metadata").write_text('{"id":"q"}')
    for batch, end in enumerate((0, 10)):
        (checkpoint / "offsets" / str(batch)).write_text(f'v1\n{{}}\n{{"sites-a":{{"0":{end}}}}}')
    sinks = [DeltaSink(TableLocation(name, tmp_path / name, {}), with_folder_schema(DEAD_ARROW), ["source_topic"])
             for name in (QUARANTINE, SESSION_ROWS)]
    write = PackedWrites({QUARANTINE: ArrowTable(KIND_DEAD, "kafka_timestamp"),
                          SESSION_ROWS: ArrowTable("absent", "kafka_timestamp")}, "zstd")
    DeltaBatchWriter(sinks, write, checkpoint)(packed_frame(spark, [dead_rows("sites-a", 0, range(0, 10))]), 1)
    assert [row[2] for row in table_rows(tmp_path / QUARANTINE)] == list(range(10))
    empty = DeltaTable(str(tmp_path / SESSION_ROWS))
    assert empty.version() == 1 and empty.to_pyarrow_table().num_rows == 0 and not written_folders(
        tmp_path / SESSION_ROWS)


def test_a_tasks_payloads_are_written_in_steps_each_a_row_group_of_the_files_it_reaches(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A task holds one step's rows, not its whole output: 230 rows in steps of 50 make files of several row
    groups, every row once and in the rows' order, and no hidden file is left."""
    monkeypatch.setattr(batch_files, "WRITE_ROWS", 50)
    payloads = [dead_rows("sites-a", 0, range(0, 40)), dead_rows("sites-b", 3, range(0, 30)),
                dead_rows("sites-a", 0, range(40, 100)), dead_rows("sites-a", 1, range(0, 70)),
                dead_rows("sites-b", 3, range(30, 60))]
    packed = [pa.RecordBatch.from_pylist([{"kind": KIND_DEAD, "rows": b.num_rows, "payload": to_ipc(b)} for b in part])
              for part in (payloads[:2], payloads[2:])]  # the JVM's batches: several payloads each
    files = BatchFiles(TableLocation(QUARANTINE, tmp_path, {}), "batch-1", KIND_DEAD, "kafka_timestamp",
                       (FOLDER_COLUMNS["topic"].name,), "zstd")
    (written,) = PackedFiles((files,))(iter(packed))
    rows = dict(zip(written["path"].to_pylist(), written["rows"].to_pylist(), strict=True))
    assert rows.pop(None) == 230  # declared
    paths = {Path(path).parent.name: path for path in rows}
    assert sorted(paths) == ["source_topic=sites-a", "source_topic=sites-b"]
    a, b = (pq.ParquetFile(paths[f"source_topic={topic}"]) for topic in ("sites-a", "sites-b"))

    def groups(file: pq.ParquetFile) -> list[int]:
        return [file.metadata.row_group(i).num_rows for i in range(file.metadata.num_row_groups)]

    # steps: payloads 1-2 (70 rows), 3 (60), 4 (70), then 5 (30) at the end; at most 50 rows a row group
    assert groups(a) == [40, 50, 10, 50, 20] and groups(b) == [30, 30]
    assert [rows[paths["source_topic=sites-a"]], rows[paths["source_topic=sites-b"]]] == [170, 60]
    assert [(r["partition"], r["offset"]) for r in a.read().to_pylist()] == (
        [(0, o) for o in range(100)] + [(1, o) for o in range(70)])
    assert [r["offset"] for r in b.read().to_pylist()] == list(range(60))
    assert not [p for p in tmp_path.rglob(".*") if p.is_file()]  # every file renamed from its hidden name


def test_folder_runs_keep_the_rows_order_within_each_folder() -> None:
    table = pa.table({"a": ["x", "y", None, "x", "y", ""], "b": ["1", "1", "1", "2", "1", "1"], "v": range(6)})
    runs = {folder: part["v"].to_pylist() for folder, part in folder_runs(table, ["a", "b"])}
    assert runs == {"a=x/b=1": [0], "a=x/b=2": [3], "a=y/b=1": [1, 4], f"a={HIVE_NULL}/b=1": [2, 5]}
    assert all(part.column_names == ["v"] for _, part in folder_runs(table, ["a", "b"]))


def test_excluding_drops_exactly_the_intervals() -> None:
    table = pa.table({"topic": ["t", "t", "t", "u"], "partition": pa.array([0, 0, 1, 0], pa.int32()),
                      "offset": [4, 5, 5, 5]})
    kept = excluding(table, [TopicPartitionInterval("t", 0, 5, 6), TopicPartitionInterval("u", 0, 0, 5)])
    assert [(r["topic"], r["partition"], r["offset"]) for r in kept.to_pylist()] == [("t", 0, 4), ("t", 1, 5),
                                                                                    ("u", 0, 5)]


def test_packing_by_bucket_and_unpacking_give_each_bucket_its_records_in_kafka_order() -> None:
    def records(offsets: list[int], buckets: list[int]) -> pa.RecordBatch:
        return pa.RecordBatch.from_pydict({"topic": ["t"] * len(offsets), "partition": [0] * len(offsets),
                                           "offset": offsets, SESSION_BUCKET: buckets})

    first = list(pack_by_bucket(iter([records([7, 1, 3], [2, 5, 2]), records([], [])])))
    second = list(pack_by_bucket(iter([records([2, 0], [2, 2])])))
    payloads: dict[int, list[bytes]] = {}
    for packed in first + second:
        for bucket, payload in zip(packed[SESSION_BUCKET].to_pylist(), packed["records"].to_pylist(), strict=True):
            payloads.setdefault(bucket, []).append(payload)
    assert sorted(payloads) == [2, 5]
    for bucket, offsets in ((2, [0, 2, 3, 7]), (5, [1])):  # bucket 2: several payloads, as after a shuffle
        unpacked = unpack_records(payloads[bucket])
        assert unpacked.take(kafka_order(unpacked))["offset"].to_pylist() == offsets
    assert SESSION_BUCKET not in unpack_records(payloads[5]).column_names


def test_the_sources_session_buckets_are_sparks_bit_for_bit(spark: SparkSession) -> None:
    """A checkpoint written while Spark computed the buckets keeps every session's state in the same bucket."""
    rng = random.Random(7)
    keys = [None, b"", b"a", b"session-1", "séance-ü-會話".encode(), b"\xff\xfe\x00 not utf-8",
            *(rng.randbytes(rng.randrange(0, 70)) for _ in range(400)),
            *(f"s{site}-run-{n:06d}".encode() for site in range(3) for n in range(100))]
    frame = spark.createDataFrame([(k,) for k in keys], "key BINARY")
    session = F.coalesce(F.col("key").cast("string"), F.lit(""))
    for buckets in (1, 7, 64, 1000):
        spark_buckets = [row[0] for row in frame.select(F.pmod(F.xxhash64(session), F.lit(buckets))).collect()]
        assert [session_bucket(k, buckets) for k in keys] == spark_buckets
    records = pa.RecordBatch.from_pylist([{"key": k, "value": k, "topic": "t", "partition": 0, "offset": offset}
                                          for offset, k in enumerate(keys)], schema=ARROW_SCHEMA)  # as read
    # numbers; labels; labels at the largest bucket count the settings allow
    for layout in (StateLayout(7, 0), StateLayout(16, 0, 2), StateLayout(64, 64, 8),
                   StateLayout(MAX_SESSION_BUCKETS, 64, 8)):
        spark_labels = [row[0] for row in frame.select(bucket_label(session, layout)).collect()]
        assert with_session_buckets(records, layout.labels).column(SESSION_BUCKET).to_pylist() == spark_labels
        assert set(spark_labels) <= set(layout.labels)
        if layout.buckets <= 64:  # ~700 keys reach every one of a few buckets
            assert len(set(spark_labels)) == layout.buckets
