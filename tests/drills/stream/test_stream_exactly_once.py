"""The spine's promise, end to end: every Kafka offset lands in the Delta table exactly once, through crashes.

Real broker, the real job process (`streamwarden stream`), real files; read back through the Delta log with
deltalake, Polars, DuckDB and Spark (the files of the table's version).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from fixtures.stream_process import StreamProcess, expected_ranges, produce_raw, stream_env
from streamwarden.local.broker import LocalBroker
from streamwarden.runfiles.checkpoint import commit_batches, offset_batches
from streamwarden.runfiles.heartbeat import read_heartbeat
from streamwarden.tables.content import check_content, recorded_hashes
from streamwarden.tables.location import RECORDS, TableLocation
from streamwarden.testing.exactly_once import verify_table
from streamwarden.testing.faults import CHAOS_ENV

pytestmark = pytest.mark.slow

MESSAGES = 1_050_000
CAP = 150_000
CHAOS_CAP = 20_000
CHAOS_POINTS = ("before_commit", "after_commit", "before_commit", "after_commit")


def assert_exactly_once_with_spark(spark: SparkSession, table: Path, ends: dict[str, dict[int, int]]) -> None:
    files = DeltaTable(str(table)).file_uris()
    frame = spark.read.parquet(*files).select("topic", "partition", "offset")
    duplicates = frame.groupBy("topic", "partition", "offset").count().filter("count > 1").count()
    assert duplicates == 0
    stats = {(r["topic"], r["partition"]): (r["n"], r["lo"], r["hi"]) for r in frame.groupBy("topic", "partition")
             .agg(F.count("*").alias("n"), F.min("offset").alias("lo"), F.max("offset").alias("hi")).collect()}
    assert stats == {(t, p): (end, 0, end - 1) for t, parts in ends.items() for p, end in parts.items()}


def test_million_offsets_exactly_once_through_kill9(
    broker: LocalBroker, topic_factory: Callable[..., list[str]], spark: SparkSession, tmp_path: Path
) -> None:
    topics = topic_factory(3, partitions=4)
    prefix = topics[0].rsplit("-", 1)[0]
    ends = produce_raw(broker.bootstrap_servers, topics, MESSAGES)
    assert sum(sum(p.values()) for p in ends.values()) == MESSAGES
    assert len([p for parts in ends.values() for p in parts]) == 12

    job = StreamProcess(stream_env(tmp_path / "home", broker.bootstrap_servers, f"{prefix}-.*",
                                   max_offsets_per_trigger=str(CAP)), tmp_path / "stream.log")
    checkpoint = job.settings.checkpoint_location

    # 1. kill -9 between writing a batch's files and its Delta commit, and between that commit and Spark's
    #    checkpoint commit, twice each (the job kills itself with SIGKILL). The points do not depend on the
    #    batch's size: these batches are small.
    for point in CHAOS_POINTS:
        job.start(**{CHAOS_ENV: point, "STREAMWARDEN_MAX_OFFSETS_PER_TRIGGER": str(CHAOS_CAP)})
        assert job.wait_exit(300) == -9, f"{point}: expected a SIGKILL death\n{job.log_tail()}"

    # 2. kill -9 of the whole process group at random moments (planning, reading, writing, committing).
    rng = random.Random(20261121)
    for _ in range(2):
        job.start()
        before = len(commit_batches(checkpoint))
        job.wait_until(lambda b=before: len(commit_batches(checkpoint)) > b or bool(offset_batches(checkpoint)),
                       240, "the job to plan a batch")
        time.sleep(rng.uniform(0.0, 4.0))
        job.kill9()

    # 3. a clean run to the end, watching admission control in the heartbeat, then a graceful stop.
    job.start()
    batch_sizes: list[int] = []

    def caught_up() -> bool:
        beat = read_heartbeat(job.settings.run_paths.heartbeat)
        if beat is not None and beat.event == "progress":
            batch_sizes.append(beat.num_input_rows)
        return job.caught_up(ends)

    job.wait_until(caught_up, 600, "all offsets committed")
    assert job.stop() == 0, job.log_tail()
    assert offset_batches(checkpoint)[-1] == commit_batches(checkpoint)[-1]

    table = job.settings.root("output") / RECORDS
    for reader in ("deltalake", "polars", "duckdb"):
        report = verify_table(table, expected_ranges(ends), reader=reader)
        assert report.ok, report.summary()
        assert report.rows == MESSAGES
    assert_exactly_once_with_spark(spark, table, ends)
    # every file the table lists, through the kill -9s, has the content hash its commit recorded
    location = TableLocation.of(job.settings, RECORDS)
    sizes = {str(a["path"]): int(a["size_bytes"])
             for a in pa.table(location.open().get_add_actions(flatten=True)).to_pylist()}
    content = check_content(location, sizes, recorded_hashes(location, location.open().version()))
    assert (content.checked, content.problems, content.unrecorded) == (len(sizes), (), ())

    files = pa.table(DeltaTable(str(table)).get_add_actions(flatten=True))
    rows_per_batch: dict[str, int] = {}
    for path, rows in zip(files.column("path").to_pylist(), files.column("num_records").to_pylist(), strict=True):
        rows_per_batch[path.split("/")[0]] = rows_per_batch.get(path.split("/")[0], 0) + rows
    assert max(rows_per_batch.values()) <= CAP
    assert batch_sizes and max(batch_sizes) <= CAP
    assert any(size == CAP for size in batch_sizes) or CAP in rows_per_batch.values()
