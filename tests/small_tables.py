"""Real Delta tables of many small files, shaped like the stream's output, for the maintenance tests."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import write_deltalake

from streamwarden.settings import Settings, load_settings
from streamwarden.tables.location import SESSION_ROWS, TableLocation

SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                    ("row_key", pa.string()), ("amount", pa.float64()), ("date", pa.string())])
PARTITION_BY = ["topic", "date"]


def settings_for(tmp_path: Path) -> Settings:
    return load_settings(home=tmp_path / "home", output_root=tmp_path / "out")


def rows(topic: str, partition: int, first: int, count: int, date: str = "2026-11-23") -> pa.Table:
    """``count`` rows of consecutive offsets from ``first``, two rows per offset (a snapshot of two rows)."""
    offsets = [first + i // 2 for i in range(count)]
    return pa.table({"topic": [topic] * count, "partition": pa.array([partition] * count, pa.int32()),
                     "offset": offsets, "row_key": [f"k{i % 2}" for i in range(count)],
                     "amount": [float(o) for o in offsets], "date": [date] * count}, schema=SCHEMA)


def small_files_table(settings: Settings, files_per_partition: int = 12,
                      partitions: tuple[tuple[str, str], ...] = (("orders", "2026-11-23"), ("orders", "2026-11-24"),
                                                                  ("payments", "2026-11-23"))) -> TableLocation:
    """``session_rows`` with ``files_per_partition`` appends of 20 rows in each (topic, date) partition."""
    location = TableLocation.of(settings, SESSION_ROWS)
    location.create(SCHEMA, PARTITION_BY)
    next_offset: dict[str, int] = {}
    for number in range(files_per_partition):
        for topic, date in partitions:
            first = next_offset.get(topic, 0)
            write_deltalake(location.uri, rows(topic, number % 2, first, 20, date), mode="append",
                            storage_options=location.storage_options or None)
            next_offset[topic] = first + 10
    return location


def replace_keeping_size(path: Path, data: pa.Table) -> None:
    """Overwrite the Parquet file ``path`` with ``data``, padded (footer metadata) to the file's old size.

    Readers that trust the size in the Delta log then read the new file without complaint: the tampering
    only the content can reveal.
    """
    size = path.stat().st_size

    def write(pad: int, extra: dict[str, str]) -> int:
        writer = pq.ParquetWriter(path, data.schema, compression="zstd", store_schema=False)
        writer.write_table(data)
        writer.add_key_value_metadata({"pad": "x" * pad, **extra})
        writer.close()
        return path.stat().st_size

    for extra in ({}, {"p": ""}):  # the length's varint grows a byte at 128: one more key steps over it
        bare = write(0, extra)
        for pad in range(max(0, size - bare - 4), size - bare + 1):
            if write(pad, extra) == size:
                return
    raise AssertionError(f"cannot pad {path} to {size} bytes")
