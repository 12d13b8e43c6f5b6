"""``streamwarden tables`` and ``streamwarden.tables.read``: what a person and a script see of the tables."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from streamwarden.settings import load_settings
from streamwarden.stream.sink.delta_sink import DeltaSink
from streamwarden.tables import read
from streamwarden.tables.location import QUARANTINE, SESSION_ROWS, TableLocation

SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                    ("source_topic", pa.string())])


def _commit(sink: DeltaSink, partition: int, start: int, end: int) -> None:
    topic = "sites-0"
    plan = sink.plan({topic: {partition: (start, end)}}, batch_id=start)
    folder = Path(plan.write_dir) / f"source_topic={topic}"
    folder.mkdir(parents=True, exist_ok=True)
    rows = pa.table({"topic": [topic] * (end - start), "partition": pa.array([partition] * (end - start), pa.int32()),
                     "offset": pa.array(range(start, end), pa.int64())})
    pq.write_table(rows, folder / "part-00000.parquet")
    sink.commit(plan)


@pytest.fixture()
def home(tmp_path: Path) -> Path:
    settings = load_settings(home=tmp_path)
    sink = DeltaSink(TableLocation.of(settings, SESSION_ROWS), SCHEMA, ["source_topic"])
    _commit(sink, 0, 0, 100)
    _commit(sink, 1, 0, 40)
    _commit(sink, 0, 100, 150)
    return tmp_path


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMWARDEN_")}
    env["STREAMWARDEN_HOME"] = str(home)
    return subprocess.run([sys.executable, "-m", "streamwarden", "tables", *args], env=env, capture_output=True,
                          text=True, timeout=120)


def test_tables_lists_version_rows_files_and_committed_offsets(home: Path) -> None:
    run = _cli(home, "--json")
    assert run.returncode == 0, run.stderr
    by_name = {t["name"]: t for t in json.loads(run.stdout)}
    rows = by_name[SESSION_ROWS]
    assert (rows["version"], rows["rows"], rows["files"], rows["last_operation"]) == (3, 190, 3, "WRITE")
    assert [(p["topic"], p["partition"], p["rows"], p["committed"]) for p in rows["partitions"]] == [
        ("sites-0", 0, 150, [[0, 150]]), ("sites-0", 1, 40, [[0, 40]])]
    assert by_name[QUARANTINE]["exists"] is False

    text = _cli(home).stdout
    assert "session_rows: version 3, 190 rows in 3 files" in text
    assert "[0, 150)" in text and "quarantine: no Delta table yet" in text


def test_read_gives_a_dataset_of_any_version(home: Path) -> None:
    settings = load_settings(home=home)
    newest = read(settings, SESSION_ROWS)
    assert newest.count_rows() == 190
    assert newest.to_table(filter=ds.field("offset") >= 100).num_rows == 50
    assert read(settings, SESSION_ROWS, version=1).count_rows() == 100
    assert set(newest.schema.names) == set(SCHEMA.names)


def test_an_unknown_table_is_refused(home: Path) -> None:
    run = _cli(home, "sessions")
    assert run.returncode == 78 and "unknown table 'sessions'" in run.stderr


def test_from_a_folder_without_the_platform_the_command_says_where_it_looked_and_why(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMWARDEN_")}
    run = subprocess.run([sys.executable, "-m", "streamwarden", "tables"], env=env, cwd=elsewhere,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "no Delta table yet" in run.stdout
    assert f"The platform's home is {elsewhere / '.streamwarden'}" in run.stderr
    assert "run this command from the checkout or set STREAMWARDEN_HOME" in run.stderr


def test_a_home_with_tables_prints_no_such_hint(home: Path) -> None:
    run = _cli(home)
    assert run.returncode == 0 and "platform's home" not in run.stderr
