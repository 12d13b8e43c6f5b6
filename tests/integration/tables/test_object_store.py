"""Output tables on an object store: the executors' files, the driver-side commit and every reader, against a
loopback S3 server.

A real S3-compatible server (moto's, on 127.0.0.1, dummy credentials) holds the bucket. Each batch's files are
written by the code the executors run (:class:`~streamwarden.stream.sink.batch_files.BatchFiles`, pyarrow's S3
filesystem: no Hadoop connector), two tasks per batch; the rest is the production path too: ``DeltaSink``
plans, lists and reads the files through the same filesystem and commits with delta-rs;
``streamwarden.tables.read`` and ``streamwarden tables`` read the table back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from pyarrow import fs

from fixtures.s3_server import BUCKET, SECRET, loopback_s3, storage_options
from streamwarden.failures import ConfigError, FailureClass
from streamwarden.settings import Settings, load_settings
from streamwarden.storage import StoreUri
from streamwarden.stream.sink import delta_sink
from streamwarden.stream.sink.batch_files import BatchFiles, with_folder_schema
from streamwarden.stream.sink.delta_sink import BatchPlan, ConcurrentWriterError, DeltaSink, batch_folder
from streamwarden.tables import read
from streamwarden.tables.location import QUARANTINE, SESSION_ROWS, TableLocation
from streamwarden.tables.ranges import flatten

ROWS = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                  ("value", pa.string()), ("ts", pa.timestamp("us", tz="UTC"))])
SCHEMA = with_folder_schema(ROWS)
PARTITION_BY = ["source_topic"]
START = datetime(2026, 11, 29, tzinfo=UTC)


def settings_on(url: str, home: Path) -> Settings:
    """Settings with a fresh output root in the bucket, given as Spark names it (``s3a://``)."""
    return load_settings(home=home, output_root=f"s3a://{BUCKET}/{uuid.uuid4().hex[:12]}/out",
                         storage_options=storage_options(url))


@pytest.fixture()
def settings(s3_endpoint: str, tmp_path: Path) -> Settings:
    return settings_on(s3_endpoint, tmp_path)


def store_of(location: TableLocation) -> fs.FileSystem:
    return location.filesystem()[0]


def rows(topic: str, partition: int, start: int, end: int) -> pa.Table:
    return pa.table({"topic": [topic] * (end - start), "partition": pa.array([partition] * (end - start), pa.int32()),
                     "offset": pa.array(range(start, end), pa.int64()), "value": [f"v{o}" for o in range(start, end)],
                     "ts": [START + timedelta(seconds=o) for o in range(start, end)]}, schema=ROWS)


def executor_write(sink: DeltaSink, plan: BatchPlan, tasks: list[pa.Table]) -> None:
    """What the batch's tasks do: each writes its rows (less the offsets already committed) through pyarrow."""
    sink.discard_written(plan)
    files = BatchFiles(sink.location, batch_folder(plan.key), "rows", "ts", tuple(PARTITION_BY), "zstd",
                       tuple(flatten(plan.already_committed)))
    for task, table in enumerate(tasks):
        written = files.open(task)
        written.add(table)
        written.close()


def write_batch(sink: DeltaSink, topic: str, partition: int, start: int, end: int, *, batch_id: int) -> BatchPlan:
    """Plan one batch of one topic-partition and write its rows in two tasks' files; the commit is the caller's."""
    plan = sink.plan({topic: {partition: (start, end)}}, batch_id)
    middle = (start + end) // 2
    executor_write(sink, plan, [rows(topic, partition, start, middle), rows(topic, partition, middle, end)])
    return plan


def offsets(settings: Settings) -> list[tuple[str, int, int]]:
    table = read(settings, SESSION_ROWS).to_table(columns=["topic", "partition", "offset"])
    return sorted(zip(*(table.column(c).to_pylist() for c in ("topic", "partition", "offset")), strict=True))


def test_a_batch_commits_once_on_s3_and_its_replay_commits_nothing(settings: Settings) -> None:
    location = TableLocation.of(settings, SESSION_ROWS)
    assert isinstance(location.path, StoreUri)
    assert location.uri.startswith(f"s3://{BUCKET}/")  # given as s3a://: delta-rs and pyarrow name it s3://
    assert not location.exists()
    sink = DeltaSink(location, SCHEMA, PARTITION_BY)
    assert location.exists() and sink.table.version() == 0

    plan = write_batch(sink, "sites-0", 0, 0, 100, batch_id=0)
    assert plan.write_dir == f"{location.uri}/batch-{plan.key}"
    result = sink.commit(plan)
    assert (result.version, result.rows, result.files) == (1, 100, 2)  # a file per task
    assert offsets(settings) == [("sites-0", 0, o) for o in range(100)]
    paths = sink.table.get_add_actions(flatten=True).column("path").to_pylist()
    assert all(p.startswith(f"batch-{plan.key}/source_topic=sites-0/part-") for p in paths)

    replay = sink.plan({"sites-0": {0: (0, 100)}}, batch_id=0)  # the checkpoint replays the batch
    assert replay.fully_committed and replay.write_dir == plan.write_dir
    with pytest.raises(ValueError, match="fully committed"):
        sink.commit(replay)
    overlap = write_batch(DeltaSink(location, SCHEMA, PARTITION_BY), "sites-0", 0, 50, 150, batch_id=1)
    assert overlap.already_committed == {"sites-0": {0: [(50, 100)]}}  # the tasks leave offsets 50-99 out
    assert sink.commit(overlap).rows == 50
    assert offsets(settings) == [("sites-0", 0, o) for o in range(150)]
    assert read(settings, SESSION_ROWS, version=1).count_rows() == 100


def test_a_crashed_attempt_is_invisible_and_its_replay_commits_once(settings: Settings) -> None:
    sink = DeltaSink(TableLocation.of(settings, SESSION_ROWS), SCHEMA, PARTITION_BY)
    write_batch(sink, "sites-1", 3, 0, 40, batch_id=0)  # files uploaded, the driver died before step 4
    assert read(settings, SESSION_ROWS).count_rows() == 0
    restarted = DeltaSink(TableLocation.of(settings, SESSION_ROWS), SCHEMA, PARTITION_BY)
    restarted.commit(write_batch(restarted, "sites-1", 3, 0, 40, batch_id=0))  # the overwrite, then the commit
    assert offsets(settings) == [("sites-1", 3, o) for o in range(40)]


def test_a_writer_committing_between_the_check_and_the_commit_wins_on_s3(
        settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """delta-rs commits to S3 with a conditional put: the second commit of a version fails, it is not lost."""
    sink = DeltaSink(TableLocation.of(settings, SESSION_ROWS), SCHEMA, PARTITION_BY)
    sink.commit(write_batch(sink, "sites-0", 0, 0, 100, batch_id=1))
    plan = write_batch(sink, "sites-0", 0, 100, 150, batch_id=2)  # extends run 0
    other = DeltaSink(TableLocation.of(settings, SESSION_ROWS), SCHEMA, PARTITION_BY)
    other_plan = write_batch(other, "sites-0", 0, 120, 200, batch_id=0)  # explicit offsets: opens run 1

    def other_commits_first(point: str) -> None:
        if point == "before_commit":
            monkeypatch.setattr(delta_sink, "chaos_point", lambda _: None)
            other.commit(other_plan)

    monkeypatch.setattr(delta_sink, "chaos_point", other_commits_first)
    with pytest.raises(ConcurrentWriterError, match="lost to another writer") as caught:
        sink.commit(plan)
    assert caught.value.failure_class is FailureClass.INTEGRITY
    assert offsets(settings) == [("sites-0", 0, o) for o in [*range(100), *range(120, 200)]]


def _cli(settings: Settings, *args: str, options: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STREAMWARDEN_", "AWS_"))}
    env.update({"STREAMWARDEN_HOME": str(settings.home), "STREAMWARDEN_OUTPUT_ROOT": str(settings.output_root),
                "STREAMWARDEN_STORAGE_OPTIONS": json.dumps(options or settings.storage_options)})
    return subprocess.run([sys.executable, "-m", "streamwarden", "tables", *args], env=env, capture_output=True,
                          text=True, timeout=120)


def test_streamwarden_tables_and_read_on_s3(settings: Settings) -> None:
    sink = DeltaSink(TableLocation.of(settings, SESSION_ROWS), SCHEMA, PARTITION_BY)
    sink.commit(write_batch(sink, "sites-0", 0, 0, 100, batch_id=0))
    sink.commit(write_batch(sink, "sites-0", 1, 0, 40, batch_id=1))
    dataset = read(settings, SESSION_ROWS)
    assert dataset.count_rows() == 140 and set(dataset.schema.names) == set(SCHEMA.names)
    assert dataset.to_table(filter=ds.field("partition") == 1).num_rows == 40

    run = _cli(settings, "--json")
    assert run.returncode == 0, run.stderr
    by_name = {t["name"]: t for t in json.loads(run.stdout)}
    table = by_name[SESSION_ROWS]
    assert (table["version"], table["rows"], table["files"], table["path"]) == (
        2, 140, 4, f"{str(settings.output_root).replace('s3a://', 's3://', 1)}/{SESSION_ROWS}")
    assert [(p["partition"], p["rows"], p["committed"]) for p in table["partitions"]] == [
        (0, 100, [[0, 100]]), (1, 40, [[0, 40]])]
    assert by_name[QUARANTINE]["exists"] is False

    text = _cli(settings)
    assert text.returncode == 0 and "session_rows: version 2, 140 rows in 4 files" in text.stdout
    assert "quarantine: no Delta table yet" in text.stdout
    assert SECRET not in run.stdout + run.stderr + text.stdout + text.stderr


def test_an_unreachable_store_is_an_environment_failure_that_echoes_no_secret(settings: Settings) -> None:
    run = _cli(settings, options={**settings.storage_options, "AWS_ENDPOINT_URL": "http://127.0.0.1:9"})
    assert run.returncode == 75 and "Traceback" not in run.stderr, run.stderr[-3000:]
    assert "ENVIRONMENT: table 'session_rows' at s3://lake/" in run.stderr and "cannot be reached" in run.stderr
    assert SECRET not in run.stdout + run.stderr


def test_an_http_endpoint_needs_allow_http_and_the_error_names_no_key(settings: Settings) -> None:
    options = {k: v for k, v in settings.storage_options.items() if k != "AWS_ALLOW_HTTP"}
    location = TableLocation(SESSION_ROWS, StoreUri("s3", BUCKET, "x"), options)
    with pytest.raises(ConfigError, match="AWS_ALLOW_HTTP") as caught:
        location.exists()
    assert SECRET not in str(caught.value) and caught.value.failure_class is FailureClass.CONFIG


def test_delta_rs_writes_each_log_entry_with_a_conditional_put(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """What catches a second writer on S3 (docs/delta-rs-behaviour.md): re-check after a deltalake upgrade."""
    from moto.s3.responses import S3Response

    seen: list[str | None] = []
    put_object = S3Response.put_object

    def recording(response: S3Response) -> object:
        if "/_delta_log/" in response.path and response.path.endswith(".json"):
            seen.append(response.headers.get("If-None-Match"))
        return put_object(response)

    monkeypatch.setattr(S3Response, "put_object", recording)
    with loopback_s3(in_process=True) as url:  # the requests are seen in this process
        sink = DeltaSink(TableLocation.of(settings_on(url, tmp_path), SESSION_ROWS), SCHEMA, PARTITION_BY)
        sink.commit(write_batch(sink, "sites-0", 0, 0, 10, batch_id=0))
    assert seen == ["*", "*"]  # the table's creation and the batch
