"""Check a Parquet table the way an outside reader sees it: every offset once, none missing, manifests true.

The table folder is read by listing it, as pyarrow (``pyarrow.dataset``, hive partitioning, default
``ignore_prefixes``) or DuckDB (``read_parquet('<root>/**/*.parquet', hive_partitioning=true)``) would;
``_manifests`` and other ``_``/``.``-prefixed entries are not data. Offsets are checked with numpy on three
columns (about 20 bytes a row), so a few million rows are fine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.compute as pc  # type: ignore[import-untyped, unused-ignore]
import pyarrow.dataset as ds  # type: ignore[import-untyped, unused-ignore]
import pyarrow.parquet as pq  # type: ignore[import-untyped, unused-ignore]

from streamwarden.stream.sink.commit_protocol import CommitProtocolError, load_manifests, visible_parquet_files
from streamwarden.stream.sink.ranges import IntervalIndex, flatten, index_size

Reader = Literal["pyarrow", "duckdb"]
Expected = Mapping[str, Mapping[int, set[int]]] | Mapping[str, Mapping[int, tuple[int, int]]]
Offsets = npt.NDArray[np.int64]
COLUMNS = ("topic", "partition", "offset")


class DuplicateOffset(NamedTuple):
    """One offset found more than once, and how many times."""

    topic: str
    partition: int
    offset: int
    copies: int


@dataclass
class VerificationReport:
    """What :func:`verify_table` found; ``ok`` when nothing is wrong."""

    table_root: Path
    reader: Reader
    rows: int = 0
    rows_per_partition: dict[str, dict[int, int]] = field(default_factory=dict)
    duplicates: int = 0  # rows beyond the first copy of their (topic, partition, offset)
    duplicate_examples: list[DuplicateOffset] = field(default_factory=list)
    missing: IntervalIndex = field(default_factory=dict)  # the first intervals per partition only
    missing_count: int = 0
    unexpected: IntervalIndex = field(default_factory=dict)  # the first intervals per partition only
    unexpected_count: int = 0
    problems: list[str] = field(default_factory=list)  # manifest and file-level findings

    @property
    def ok(self) -> bool:
        """No duplicate, missing or unexpected offset and no problem."""
        return not (self.duplicates or self.missing_count or self.unexpected_count or self.problems)

    def summary(self) -> str:
        """A few lines for a person."""
        lines = [f"{'OK' if self.ok else 'FAILED'}: {self.table_root} via {self.reader}: {self.rows} rows "
                 f"in {sum(len(p) for p in self.rows_per_partition.values())} topic-partition(s)"]
        if self.duplicates:
            shown = ", ".join(f"{d.topic}/{d.partition}@{d.offset} x{d.copies}"
                              for d in self.duplicate_examples)
            lines.append(f"  {self.duplicates} duplicate row(s), e.g. {shown}")
        for label, count, index in (("missing", self.missing_count, self.missing),
                                    ("unexpected", self.unexpected_count, self.unexpected)):
            if count:
                shown = ", ".join(f"{i.topic}/{i.partition}[{i.start},{i.end})" for i in flatten(index)[:5])
                lines.append(f"  {count} {label} offset(s), e.g. {shown}")
        lines.extend(f"  problem: {p}" for p in self.problems)
        return "\n".join(lines)


def verify_table(
    table_root: Path,
    expected: Expected | None = None,
    reader: Reader = "pyarrow",
    *,
    check_manifests: bool = True,
    max_examples: int = 10,
) -> VerificationReport:
    """Read ``table_root`` like an outside reader and check offsets (and manifests) for exactly-once.

    ``expected`` gives per topic-partition either the exact offsets (a set; right for compacted or
    transactional topics with offset gaps) or a half-open range ``(start, end)``. Without it only
    duplicates are looked for. ``check_manifests=False`` skips the manifest checks (for tables written
    without the commit protocol).
    """
    report = VerificationReport(table_root, reader)
    table = _read_offsets(table_root, reader)
    report.rows = table.num_rows
    nulls = sum(table.column(c).null_count for c in COLUMNS)
    if nulls:
        report.problems.append(f"{nulls} null value(s) in {', '.join(COLUMNS)}")
        table = table.drop_null()
    found = _offsets_by_partition(table, report, max_examples)
    if expected is not None:
        _compare(found, expected, report, max_examples)
    if check_manifests:
        report.problems.extend(_manifest_problems(table_root))
    return report


def _read_offsets(table_root: Path, reader: Reader) -> pa.Table:
    """``topic`` (string), ``partition`` and ``offset`` (int64) of every visible row."""
    empty = pa.table({"topic": pa.array([], pa.string()), "partition": pa.array([], pa.int64()),
                      "offset": pa.array([], pa.int64())})
    if not visible_parquet_files(table_root):
        return empty
    table = _read_duckdb(table_root) if reader == "duckdb" else _read_pyarrow(table_root)
    return pa.table({"topic": pc.cast(table.column("topic"), pa.string()),
                     "partition": pc.cast(table.column("partition"), pa.int64()),
                     "offset": pc.cast(table.column("offset"), pa.int64())})


def _read_pyarrow(table_root: Path) -> pa.Table:
    """Discover the hive fields, then read them all as strings (inference would turn topic "007" into 7)."""
    names = ds.dataset(table_root, format="parquet", partitioning="hive").partitioning.schema.names
    partitioning = ds.partitioning(pa.schema([(name, pa.string()) for name in names]), flavor="hive")
    return ds.dataset(table_root, format="parquet", partitioning=partitioning).to_table(columns=list(COLUMNS))


def _read_duckdb(table_root: Path) -> pa.Table:
    import duckdb

    query = ('SELECT topic, partition, "offset" FROM read_parquet(?, hive_partitioning = true, '
             "hive_types_autocast = false)")
    with duckdb.connect() as con:
        return con.sql(query, params=[f"{table_root}/**/*.parquet"]).to_arrow_table()


def _offsets_by_partition(table: pa.Table, report: VerificationReport, max_examples: int
                          ) -> dict[tuple[str, int], Offsets]:
    """Sorted unique offsets per (topic, partition); counts rows and duplicates into ``report``."""
    encoded = pc.dictionary_encode(table.column("topic")).combine_chunks()
    names: list[str] = encoded.dictionary.to_pylist()
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    partitions = table.column("partition").to_numpy()
    offsets = table.column("offset").to_numpy()
    order = np.lexsort((offsets, partitions, codes))
    codes, partitions, offsets = codes[order], partitions[order], offsets[order]
    same_partition = (codes[1:] == codes[:-1]) & (partitions[1:] == partitions[:-1])
    repeated = same_partition & (offsets[1:] == offsets[:-1])
    report.duplicates = int(repeated.sum())
    columns = (codes, partitions, offsets)
    report.duplicate_examples = _duplicate_examples(names, columns, repeated, max_examples)
    found: dict[tuple[str, int], Offsets] = {}
    if not len(offsets):
        return found
    starts = np.flatnonzero(np.r_[True, ~same_partition])
    for first, last in zip(starts, [*starts[1:], len(offsets)], strict=True):
        topic, partition = names[codes[first]], int(partitions[first])
        report.rows_per_partition.setdefault(topic, {})[partition] = int(last - first)
        found[(topic, partition)] = np.unique(offsets[first:last])
    return found


def _duplicate_examples(names: list[str], columns: tuple[Offsets, Offsets, Offsets],
                        repeated: npt.NDArray[np.bool_], limit: int) -> list[DuplicateOffset]:
    """The first ``limit`` duplicated offsets (``repeated[i]``: sorted row ``i + 1`` equals row ``i``)."""
    codes, partitions, offsets = columns
    examples: list[DuplicateOffset] = []
    for position in np.flatnonzero(repeated):
        key = (names[codes[position]], int(partitions[position]), int(offsets[position]))
        if examples and examples[-1][:3] == key:
            examples[-1] = examples[-1]._replace(copies=examples[-1].copies + 1)
        elif len(examples) < limit:
            examples.append(DuplicateOffset(*key, copies=2))
        else:
            break
    return examples


def _compare(found: dict[tuple[str, int], Offsets], expected: Expected, report: VerificationReport,
             limit: int) -> None:
    """Fill ``missing`` and ``unexpected`` from the found and the expected offsets."""
    wanted = {(topic, int(partition)): _expected_array(spec)
              for topic, parts in expected.items() for partition, spec in parts.items()}
    empty: Offsets = np.array([], np.int64)
    for topic, partition in sorted(wanted.keys() | found.keys()):
        have = found.get((topic, partition), empty)
        want = wanted.get((topic, partition), empty)
        missing = np.setdiff1d(want, have, assume_unique=True)
        unexpected = np.setdiff1d(have, want, assume_unique=True)
        report.missing_count += len(missing)
        report.unexpected_count += len(unexpected)
        if len(missing):
            report.missing.setdefault(topic, {})[partition] = _runs(missing)[:limit]
        if len(unexpected):
            report.unexpected.setdefault(topic, {})[partition] = _runs(unexpected)[:limit]


def _expected_array(spec: set[int] | tuple[int, int]) -> Offsets:
    if isinstance(spec, tuple):
        return np.arange(spec[0], spec[1], dtype=np.int64)
    return np.unique(np.fromiter(spec, dtype=np.int64, count=len(spec)))


def _runs(values: Offsets) -> list[tuple[int, int]]:
    """Sorted unique offsets as half-open intervals of consecutive values."""
    breaks = np.flatnonzero(np.diff(values) != 1)
    starts = values[np.r_[0, breaks + 1]]
    ends = values[np.r_[breaks, len(values) - 1]] + 1
    return [(int(s), int(e)) for s, e in zip(starts, ends, strict=True)]


def _manifest_problems(table_root: Path) -> list[str]:
    """Manifests valid and disjoint, each listed file present with its row count, no unlisted file."""
    try:
        manifests = load_manifests(table_root)
    except CommitProtocolError as exc:
        return [exc.message]
    problems: list[str] = []
    listed: set[str] = set()
    for manifest in manifests:
        for committed in manifest.files:
            listed.add(committed.path)
            path = table_root / committed.path
            rows = pq.read_metadata(path).num_rows if path.is_file() else None
            if rows != committed.rows:
                found = "no file" if rows is None else f"{rows} rows"
                problems.append(f"manifest {manifest.name}: {committed.path} has {found}, "
                                f"manifest says {committed.rows}")
    unlisted = sorted(visible_parquet_files(table_root) - listed)
    if unlisted:
        problems.append(f"{len(unlisted)} file(s) in no manifest, e.g. {unlisted[0]}")
    covered, rows = sum(index_size(m.covers) for m in manifests), sum(m.rows for m in manifests)
    if rows > covered:
        problems.append(f"manifests list more rows ({rows}) than they cover offsets ({covered})")
    return problems
