"""Where an output table lives, how it is created and opened, and the checks that it is ours."""

from __future__ import annotations

import base64
from pathlib import Path

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction
from pyarrow import fs

from streamwarden.failures import ConfigError, FailureClass
from streamwarden.settings import load_settings
from streamwarden.storage import StoreUri
from streamwarden.tables.location import (
    LEGACY_MANIFESTS,
    QUARANTINE,
    RECORDS,
    SESSION_ROWS,
    TABLES,
    TableLocation,
)

SCHEMA = pa.schema([pa.field("topic", pa.string(), nullable=False), ("partition", pa.int32()),
                    ("offset", pa.int64()), ("value", pa.binary()), ("ts", pa.timestamp("us", tz="UTC")),
                    ("ok", pa.bool_()), ("score", pa.float64()), ("source_topic", pa.string()),
                    ("event_date", pa.string())])
PARTITION_BY = ["source_topic", "event_date"]


def location(tmp_path: Path, name: str = SESSION_ROWS) -> TableLocation:
    return TableLocation(name, tmp_path / name, {})


def test_of_names_a_table_under_the_output_root(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path / "home", output_root=tmp_path / "out")
    assert TABLES == (SESSION_ROWS, QUARANTINE, RECORDS)
    for name in TABLES:
        table = TableLocation.of(settings, name)
        assert (table.name, table.path, table.storage_options) == (name, tmp_path / "out" / name, {})
        assert table.uri == str(tmp_path / "out" / name)
    with pytest.raises(ConfigError, match="unknown table 'sessions'") as caught:
        TableLocation.of(settings, "sessions")
    assert caught.value.failure_class is FailureClass.CONFIG


def test_create_makes_version_zero_and_reopening_checks_schema_and_partitions(tmp_path: Path) -> None:
    table = location(tmp_path)
    assert not table.exists() and table.open_or_none() is None
    created = table.create(SCHEMA, PARTITION_BY)
    assert table.exists() and created.version() == 0
    assert pa.schema(created.schema().to_arrow()).equals(SCHEMA)  # the Delta round trip keeps every type
    assert list(created.metadata().partition_columns) == PARTITION_BY
    assert created.metadata().configuration["delta.checkpointInterval"] == "100"
    assert table.create(SCHEMA, PARTITION_BY).version() == 0  # same settings: the table is continued

    for schema, partition_by in [
        (SCHEMA.remove(SCHEMA.get_field_index("score")), PARTITION_BY),
        (SCHEMA.set(2, pa.field("offset", pa.int32())), PARTITION_BY),
        (SCHEMA.set(0, pa.field("topic", pa.string())), PARTITION_BY),  # nullable now
        (SCHEMA, ["source_topic"]),
        (SCHEMA, ["event_date", "source_topic"]),
        (SCHEMA, []),
    ]:
        with pytest.raises(ConfigError, match="was created with partitions") as caught:
            table.create(schema, partition_by)
        assert caught.value.details == {"table": SESSION_ROWS}
    assert DeltaTable(table.uri).version() == 0


def test_unpartitioned_table(tmp_path: Path) -> None:
    table = location(tmp_path, RECORDS)
    assert list(table.create(SCHEMA, []).metadata().partition_columns) == []
    assert table.create(SCHEMA, []).version() == 0
    with pytest.raises(ConfigError, match="partitions"):
        table.create(SCHEMA, PARTITION_BY)


def test_open_a_version_or_the_newest(tmp_path: Path) -> None:
    table = location(tmp_path)
    with pytest.raises(ConfigError, match="no Delta table 'session_rows'"):
        table.open()
    created = table.create(SCHEMA, PARTITION_BY)
    created.create_write_transaction([], mode="append", schema=SCHEMA, commit_properties=CommitProperties(
        app_transactions=[Transaction("streamwarden:t:0:commits", 1)]))
    assert table.open().version() == 1 and table.open(0).version() == 0
    assert table.open().transaction_version("streamwarden:t:0:commits") == 1
    assert table.open(0).transaction_version("streamwarden:t:0:commits") is None
    newest = table.open_or_none()
    assert newest is not None and newest.version() == 1


def test_manifest_layout_of_an_earlier_release_is_refused(tmp_path: Path) -> None:
    table = location(tmp_path)
    (table.path / LEGACY_MANIFESTS).mkdir(parents=True)
    (table.path / "part-00000-0123456789abcdef-00000.parquet").write_bytes(b"PAR1")
    with pytest.raises(ConfigError, match=f"{LEGACY_MANIFESTS}/ from a release before Delta") as caught:
        table.create(SCHEMA, PARTITION_BY)
    assert caught.value.details == {"table": SESSION_ROWS, "path": str(table.path)}
    assert not table.exists()
    with pytest.raises(ConfigError, match=LEGACY_MANIFESTS):
        table.refuse_legacy_layout()
    location(tmp_path, QUARANTINE).refuse_legacy_layout()  # a missing or new folder is fine


def test_a_local_table_is_reached_through_pyarrows_local_filesystem(tmp_path: Path) -> None:
    table = location(tmp_path)
    store, path = table.filesystem()
    assert isinstance(store, fs.LocalFileSystem) and path == str(tmp_path / SESSION_ROWS)
    assert table.uri == str(tmp_path / SESSION_ROWS)


@pytest.mark.parametrize(("root", "options", "kind", "path"), [
    (StoreUri("s3a", "lake", "out/t"), {"aws_region": "eu-west-1", "Access_Key_Id": "a", "SECRET_ACCESS_KEY": "b"},
     fs.S3FileSystem, "lake/out/t"),
    (StoreUri("s3", "lake"), {"endpoint": "https://127.0.0.1:9000", "region": "eu-west-1"}, fs.S3FileSystem, "lake"),
    (StoreUri("gs", "lake", "t"), {}, fs.GcsFileSystem, "lake/t"),
    (StoreUri("az", "data", "out"), {"azure_storage_account_name": "acct01"}, fs.AzureFileSystem, "data/out"),
    (StoreUri("abfss", "data@acct01.dfs.core.windows.net", "out"),
     {"azure_storage_account_key": base64.b64encode(b"k" * 32).decode()}, fs.AzureFileSystem, "data/out"),
])
def test_an_object_store_table_is_reached_through_the_stores_pyarrow_filesystem(
        root: StoreUri, options: dict[str, str], kind: type, path: str) -> None:
    store, base = TableLocation(SESSION_ROWS, root, options).filesystem()
    assert isinstance(store, kind) and base == path
    if isinstance(store, fs.S3FileSystem):
        assert store.region == "eu-west-1"



def test_a_column_added_by_schema_evolution_is_matched_by_name_not_position(tmp_path: Path) -> None:
    """``alter.add_columns`` puts a new column after the partition columns; the job's frame has it before them.
    The same columns in another order continue the table; without the added column they do not."""
    from deltalake.schema import Schema as DeltaSchema

    table = location(tmp_path)
    table.create(SCHEMA, PARTITION_BY)
    added = pa.field("note", pa.string())
    table.open().alter.add_columns(DeltaSchema.from_arrow(pa.schema([added])).fields)
    recorded = pa.schema(table.open().schema().to_arrow())
    assert recorded.names[-3:] == ["source_topic", "event_date", "note"]  # after the partition columns
    writer = SCHEMA.insert(SCHEMA.get_field_index("source_topic"), added)
    assert not recorded.equals(writer)
    assert table.create(writer, PARTITION_BY).version() == 1  # continued: same columns by name
    for schema in (SCHEMA, writer.set(writer.get_field_index("note"), pa.field("note", pa.int64()))):
        with pytest.raises(ConfigError, match="was created with partitions"):
            table.create(schema, PARTITION_BY)
