"""What a set of data files holds, per topic-partition, in figures that survive any rewrite of the files.

For each (topic, Kafka partition): the row count, the lowest and highest offset, and an order-independent
hash of the rows (the sum of a 64-bit hash of every row, all columns, kept as two 32-bit halves so that
the sums never overflow). Two file sets with equal figures hold the same rows, each as often, whatever
their order or file boundaries. Each file is also checked against what the Delta log says of it (size,
row count, offset range, from its footer): a file replaced outside the log is named.

The files are scanned as one dataset, one record batch at a time (memory is bounded by a few batches,
not by the partition).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import polars as pl
import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.dataset as ds  # type: ignore[import-untyped, unused-ignore]
from pyarrow import fs  # type: ignore[import-untyped, unused-ignore]

from streamwarden.tables.batches import regrouped
from streamwarden.tables.statistics import file_statistics

HASH_SEED = 0x5EED
CHUNK_ROWS = 262_144
_HALF = 1 << 32
TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class Figures:
    """The rows of one topic-partition: count, offset range, and the order-independent hash."""

    rows: int
    min_offset: int
    max_offset: int
    hash_low: int
    hash_high: int

    def __add__(self, other: Figures) -> Figures:
        return Figures(self.rows + other.rows, min(self.min_offset, other.min_offset),
                       max(self.max_offset, other.max_offset), self.hash_low + other.hash_low,
                       self.hash_high + other.hash_high)

    @property
    def digest(self) -> str:
        """The hash as 16 hex digits (folded: for reports; equality is checked on the full sums)."""
        return f"{(self.hash_high * 0x9E3779B97F4A7C15 + self.hash_low) % 2**64:016x}"


@dataclass(frozen=True)
class LoggedFile:
    """A data file as the Delta log records it."""

    path: str
    size: int
    rows: int
    min_offset: int | None
    max_offset: int | None


@dataclass
class Fingerprint:
    """Figures per topic-partition of a set of files, and what of the files disagrees with the log."""

    figures: dict[TopicPartition, Figures] = field(default_factory=dict)
    files: int = 0
    bytes: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.figures.values())

    def add(self, key: TopicPartition, figures: Figures) -> None:
        known = self.figures.get(key)
        self.figures[key] = figures if known is None else known + figures

    def differences(self, other: Fingerprint) -> list[str]:
        """Each topic-partition whose figures differ from ``other``'s, in words ([] when equal)."""
        lines = []
        for key in sorted(set(self.figures) | set(other.figures)):
            mine, theirs = self.figures.get(key), other.figures.get(key)
            if mine != theirs:
                lines.append(f"{key[0]}[{key[1]}]: before {_describe(mine)}, after {_describe(theirs)}")
        return lines

    def to_json(self) -> list[dict[str, Any]]:
        return [{"topic": t, "partition": p, "rows": f.rows, "min_offset": f.min_offset, "max_offset": f.max_offset,
                 "hash": f.digest} for (t, p), f in sorted(self.figures.items())]


def fingerprint(files: Iterable[LoggedFile], filesystem: fs.FileSystem, schema: pa.Schema,
                constants: Mapping[str, str | None]) -> Fingerprint:
    """The figures of ``files`` (paths relative to ``filesystem``), read with the table's file ``schema``.

    Each file's size, row count and offset range (its footer) are checked against its log entry; the
    rows of all of them are then scanned together (several files at once) for the figures. ``constants``
    are the partition values, for a ``topic`` column that lives in the folder names.
    """
    result = Fingerprint()
    present = []
    for logged in files:
        result.files += 1
        info = filesystem.get_file_info(logged.path)
        if info.type != fs.FileType.File:
            result.problems.append(f"{logged.path}: in the log but not in storage")
            continue
        result.bytes += info.size
        if info.size != logged.size:
            result.problems.append(f"{logged.path}: {info.size} bytes in storage, {logged.size} in the log")
        try:
            statistics = file_statistics(logged.path, ("offset",), filesystem)
        except OSError as exc:  # listed at its size, but not given back (denied, an archive tier): the store answered
            result.problems.append(f"{logged.path}: in storage but cannot be read ({' '.join(str(exc).split())[:300]})")
            continue
        result.problems.extend(_disagreements(logged, statistics))
        present.append(logged.path)
    if present:
        for key, figures in _figures(present, filesystem, schema, constants).items():
            result.add(key, figures)
    return result


def _figures(paths: list[str], filesystem: fs.FileSystem, schema: pa.Schema,
             constants: Mapping[str, str | None]) -> dict[TopicPartition, Figures]:
    figures: dict[TopicPartition, Figures] = {}
    scanner = ds.dataset(paths, schema=schema, filesystem=filesystem, format="parquet").scanner(
        columns=sorted(schema.names))
    for chunk in regrouped(scanner.to_batches(), CHUNK_ROWS):  # small files give small batches
        frame = pl.from_arrow(chunk)
        assert isinstance(frame, pl.DataFrame)
        hashed = frame.with_columns(_hash=frame.hash_rows(seed=HASH_SEED))
        if "topic" not in hashed.columns:
            hashed = hashed.with_columns(topic=pl.lit(constants.get("topic")))
        grouped = hashed.group_by("topic", "partition").agg(
            rows=pl.len(), low=pl.col("offset").min(), high=pl.col("offset").max(),
            hash_low=(pl.col("_hash") % _HALF).sum(), hash_high=(pl.col("_hash") // _HALF).sum())
        for row in grouped.iter_rows(named=True):
            key = (str(row["topic"]), int(row["partition"]))
            part = Figures(int(row["rows"]), int(row["low"]), int(row["high"]), int(row["hash_low"]),
                           int(row["hash_high"]))
            figures[key] = part if key not in figures else figures[key] + part
    return figures


def _disagreements(logged: LoggedFile, footer: Mapping[str, Any]) -> list[str]:
    problems = []
    if footer["numRecords"] != logged.rows:
        problems.append(f"{logged.path}: {footer['numRecords']} rows in the file, {logged.rows} in the log")
    low, high = footer["minValues"].get("offset"), footer["maxValues"].get("offset")
    if logged.min_offset is not None and logged.max_offset is not None and (low, high) != (
            logged.min_offset, logged.max_offset):
        problems.append(f"{logged.path}: offsets [{low}, {high}] in the file, "
                        f"[{logged.min_offset}, {logged.max_offset}] in the log")
    return problems


def _describe(figures: Figures | None) -> str:
    if figures is None:
        return "no rows"
    return (f"{figures.rows} rows, offsets [{figures.min_offset}, {figures.max_offset}], "
            f"hash {figures.digest}")
