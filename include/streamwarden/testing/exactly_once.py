"""Exactly-once check of one Delta output table as an outside reader sees it: every offset once, none missing.

The table is read through its Delta log, never by listing its folder: only the files the log names at the
version read count (files of a batch that crashed before its commit are invisible, as they are to every
Delta reader). Three readers, which must agree:

* ``deltalake``: delta-rs's snapshot as a pyarrow dataset (:func:`streamwarden.tables.reading.dataset`);
* ``polars``: ``polars.scan_delta``;
* ``duckdb``: DuckDB over the same pyarrow dataset (``con.register``), not over a glob of the folder.

The log itself is checked too (``check_log``): every file it lists exists with the size it records, and
every row's ``(topic, partition, offset)`` lies inside the committed runs the log keeps as app
transactions (:mod:`streamwarden.tables.committed`). The runs are per table and record a whole batch's
offsets, also those whose rows went to the *other* table (``session_rows`` vs ``quarantine``), so only
"rows inside the runs" is checked, never "runs fully present as rows".

Offsets are checked with numpy on three columns (about 20 bytes a row), so a few million rows are fine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple, get_args
from urllib.parse import unquote

import numpy as np
import numpy.typing as npt
import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.compute as pc  # type: ignore[import-untyped, unused-ignore]
import pyarrow.dataset as ds  # type: ignore[import-untyped, unused-ignore]
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from streamwarden.tables.committed import Runs
from streamwarden.tables.location import LEGACY_MANIFESTS, TableLocation
from streamwarden.tables.ranges import IntervalIndex, flatten
from streamwarden.tables.reading import dataset

Reader = Literal["deltalake", "polars", "duckdb"]
READERS: tuple[Reader, ...] = get_args(Reader)
Expected = Mapping[str, Mapping[int, set[int]]] | Mapping[str, Mapping[int, tuple[int, int]]]
Offsets = npt.NDArray[np.int64]
COLUMNS = ("topic", "partition", "offset")
_SHOWN = 5  # intervals or paths named in one problem line


class DuplicateOffset(NamedTuple):
    """One offset found more than once, and how many times."""

    topic: str
    partition: int
    offset: int
    copies: int


@dataclass
class VerificationReport:
    """What :func:`verify_table` found; ``ok`` when nothing is wrong."""

    table_root: Path  # the Delta table's folder
    reader: Reader
    version: int | None = None  # the table version read; None when the folder holds no Delta table
    rows: int = 0
    rows_per_partition: dict[str, dict[int, int]] = field(default_factory=dict)
    duplicates: int = 0  # rows beyond the first copy of their (topic, partition, offset)
    duplicate_examples: list[DuplicateOffset] = field(default_factory=list)
    missing: IntervalIndex = field(default_factory=dict)  # the first intervals per partition only
    missing_count: int = 0
    unexpected: IntervalIndex = field(default_factory=dict)  # the first intervals per partition only
    unexpected_count: int = 0
    problems: list[str] = field(default_factory=list)  # findings about the log, its files and the read

    @property
    def ok(self) -> bool:
        """No duplicate, missing or unexpected offset and no problem."""
        return not (self.duplicates or self.missing_count or self.unexpected_count or self.problems)

    def summary(self) -> str:
        """A few lines for a person."""
        at = "no Delta table" if self.version is None else f"version {self.version}"
        lines = [f"{'OK' if self.ok else 'FAILED'}: {self.table_root} ({at}) via {self.reader}: {self.rows} rows "
                 f"in {sum(len(p) for p in self.rows_per_partition.values())} topic-partition(s)"]
        if self.duplicates:
            shown = ", ".join(f"{d.topic}/{d.partition}@{d.offset} x{d.copies}"
                              for d in self.duplicate_examples)
            lines.append(f"  {self.duplicates} duplicate row(s), e.g. {shown}")
        for label, count, index in (("missing", self.missing_count, self.missing),
                                    ("unexpected", self.unexpected_count, self.unexpected)):
            if count:
                lines.append(f"  {count} {label} offset(s), e.g. {_describe(index)}")
        lines.extend(f"  problem: {p}" for p in self.problems)
        return "\n".join(lines)


def verify_table(
    table_root: Path,
    expected: Expected | None = None,
    reader: Reader = "deltalake",
    *,
    check_log: bool = True,
    version: int | None = None,
    max_examples: int = 10,
) -> VerificationReport:
    """Read the Delta table at ``table_root`` (``version``, the newest when None) and check its offsets.

    ``expected`` gives per topic-partition either the exact offsets (a set; right for compacted or
    transactional topics with offset gaps) or a half-open range ``(start, end)``. Without it only
    duplicates are looked for. A folder without a Delta log (the table was never created) reads as empty.
    ``check_log=False`` skips the committed-runs check (for tables written without
    :class:`~streamwarden.stream.sink.delta_sink.DeltaSink`); a file the log lists but the folder lacks is
    always a problem, and the rows of the files that are there are still read. An unknown ``version``
    raises delta-rs's ``DeltaError``.
    """
    if reader not in READERS:
        raise ValueError(f"unknown reader {reader!r}; the readers are {', '.join(READERS)}")
    table_root = Path(table_root)
    report = VerificationReport(table_root, reader)
    location = TableLocation(name=table_root.name, path=table_root, storage_options={})
    if not location.exists():
        if (table_root / LEGACY_MANIFESTS).is_dir():
            report.problems.append(f"{table_root} holds the manifest layout of a release before Delta Lake "
                                   "tables, not a Delta table; nothing was read")
        table = _cast(_empty())
        delta = None
    else:
        delta = location.open(version)
        report.version = delta.version()
        present = _present_files(delta, table_root, report)
        try:
            table = _cast(_read_offsets(delta, location, reader, present))
        except _read_errors(reader) as exc:
            report.problems.append(f"reading the table via {reader} failed: {type(exc).__name__}: {exc}")
            table = _cast(_empty())
    report.rows = table.num_rows
    nulls = sum(table.column(c).null_count for c in COLUMNS)
    if nulls:
        report.problems.append(f"{nulls} null value(s) in {', '.join(COLUMNS)}")
        table = table.drop_null()
    found = _offsets_by_partition(table, report, max_examples)
    if expected is not None:
        _compare(found, expected, report, max_examples)
    if check_log and delta is not None:
        report.problems.extend(_outside_committed_runs(delta, found))
    return report


def _empty() -> pa.Table:
    return pa.table({"topic": pa.array([], pa.string()), "partition": pa.array([], pa.int64()),
                     "offset": pa.array([], pa.int64())})


def _cast(table: pa.Table) -> pa.Table:
    """``topic`` (string), ``partition`` and ``offset`` (int64), whatever the reader returned."""
    return pa.table({"topic": pc.cast(table.column("topic"), pa.string()),
                     "partition": pc.cast(table.column("partition"), pa.int64()),
                     "offset": pc.cast(table.column("offset"), pa.int64())})


def _present_files(delta: DeltaTable, table_root: Path, report: VerificationReport) -> set[str] | None:
    """The log's files that exist (relative paths), or None when all do; problems for the others.

    A file that is there but not with the size the log records is a problem too (rewritten or truncated);
    it is still read.
    """
    actions = pa.table(delta.get_add_actions(flatten=True))
    paths = [unquote(p) for p in actions.column("path").to_pylist()]  # the log keeps them URL-encoded
    missing: list[str] = []
    resized: list[str] = []
    for path, size in zip(paths, actions.column("size_bytes").to_pylist(), strict=True):
        file = table_root / path
        if not file.is_file():
            missing.append(path)
        elif file.stat().st_size != size:
            resized.append(f"{path} ({file.stat().st_size} bytes, the log says {size})")
    if missing:
        report.problems.append(f"{len(missing)} of {len(paths)} file(s) the log lists at version {report.version} "
                               f"are missing, e.g. {', '.join(missing[:_SHOWN])}")
    if resized:
        report.problems.append(f"{len(resized)} file(s) differ in size from the log, e.g. "
                               f"{', '.join(resized[:_SHOWN])}")
    return set(paths) - set(missing) if missing else None


def _read_errors(reader: Reader) -> tuple[type[BaseException], ...]:
    """What the reader raises on a damaged file (turned into a problem, not a crash)."""
    errors: tuple[type[BaseException], ...] = (OSError, pa.ArrowException, DeltaError)
    if reader == "polars":
        import polars as pl

        errors += (pl.exceptions.PolarsError,)
    elif reader == "duckdb":
        import duckdb

        errors += (duckdb.Error,)
    return errors


def _read_offsets(delta: DeltaTable, location: TableLocation, reader: Reader, present: set[str] | None
                  ) -> pa.Table:
    """``topic``, ``partition`` and ``offset`` of every row of the files the log lists (those ``present``)."""
    if reader == "polars" and present is None:
        import polars as pl

        frame = pl.scan_delta(location.uri, version=delta.version()).select(*COLUMNS).collect()
        return frame.to_arrow()
    rows = dataset(delta, location)
    if present is not None:
        rows = ds.FileSystemDataset([f for f in rows.get_fragments() if f.path in present], rows.schema,
                                    rows.format, rows.filesystem)
    if reader == "polars":  # scan_delta cannot skip a missing file: read the others through the dataset
        import polars as pl

        return pl.scan_pyarrow_dataset(rows).select(*COLUMNS).collect().to_arrow()
    if reader == "duckdb":
        return _read_duckdb(rows)
    return rows.to_table(columns=list(COLUMNS))


def _read_duckdb(rows: ds.Dataset) -> pa.Table:
    import duckdb

    with duckdb.connect() as con:
        con.register("delta_rows", rows)
        result: Any = con.sql('SELECT topic, "partition", "offset" FROM delta_rows').to_arrow_table()
        return result


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
    first_copy = np.r_[True, ~repeated]  # sorted already: dropping repeats leaves unique offsets
    for first, last in zip(starts, [*starts[1:], len(offsets)], strict=True):
        topic, partition = names[codes[first]], int(partitions[first])
        report.rows_per_partition.setdefault(topic, {})[partition] = int(last - first)
        found[(topic, partition)] = offsets[first:last][first_copy[first:last]]
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
    return np.sort(np.fromiter(spec, dtype=np.int64, count=len(spec)))  # a set: unique already


def _runs(values: Offsets) -> list[tuple[int, int]]:
    """Sorted unique offsets as half-open intervals of consecutive values."""
    breaks = np.flatnonzero(np.diff(values) != 1)
    starts = values[np.r_[0, breaks + 1]]
    ends = values[np.r_[breaks, len(values) - 1]] + 1
    return [(int(s), int(e)) for s, e in zip(starts, ends, strict=True)]


def _outside_committed_runs(delta: DeltaTable, found: dict[tuple[str, int], Offsets]) -> list[str]:
    """A problem when rows hold offsets the log's committed runs do not record."""
    committed = Runs.read(delta, sorted(found)).index()
    outside: IntervalIndex = {}
    count = 0
    for (topic, partition), have in sorted(found.items()):
        runs = committed.get(topic, {}).get(partition, [])
        starts = np.array([s for s, _ in runs], np.int64)
        ends = np.array([e for _, e in runs], np.int64)
        run = np.searchsorted(starts, have, side="right") - 1
        inside = (run >= 0) & (have < ends[np.maximum(run, 0)]) if len(runs) else np.zeros(len(have), bool)
        stray = have[~inside]
        if len(stray):
            count += len(stray)
            outside.setdefault(topic, {})[partition] = _runs(stray)
    if not count:
        return []
    return [f"{count} offset(s) have rows but lie outside the committed runs the log records (app "
            f"transactions), e.g. {_describe(outside)}"]


def _describe(index: IntervalIndex) -> str:
    return ", ".join(f"{i.topic}/{i.partition}[{i.start},{i.end})" for i in flatten(index)[:_SHOWN])
