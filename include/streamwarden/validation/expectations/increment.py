"""Which rows of a table the data expectations read: those committed since its last validated version, in
batches of bounded size.

A scheduled run checks the rows a table gained since the version the last passing run validated
(``last_validated.json``): the files the pinned version lists that were written after that version's commit,
and of their rows those at or beyond the offsets that version claimed per topic-partition (a compaction's
new file holds older rows too). Without a last validated version (the first run, a version that no longer
reads, or the Param ``rows`` = ``all``) every row is read. Either way the files are read in batches whose row
counts (from the log) add up to at most ``STREAMWARDEN_VALIDATION_BATCH_ROWS``, each validated on its own,
so a run's memory does not grow with the table. A duplicate across two batches is check 1's to find (it
reads the offsets of the same rows and more, in DuckDB: :mod:`streamwarden.validation.window`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import pandas as pd
import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.compute as pc  # type: ignore[import-untyped, unused-ignore]
import pyarrow.dataset as ds  # type: ignore[import-untyped, unused-ignore]
from deltalake.exceptions import DeltaError

from streamwarden.tables.commits import commit_info
from streamwarden.tables.committed import TopicPartition
from streamwarden.validation.expectations.frames import is_string
from streamwarden.validation.snapshot import PinnedTable

WRITTEN_BEFORE_COMMIT_S = 600
"""How long before a commit its files may have been written (a slow batch): files written this long before
the last validated commit are read too, their older rows dropped by offset."""


@dataclass(frozen=True)
class RowsToCheck:
    """What the data expectations read of one table: the files, in batches, and the offsets already checked."""

    table: str
    version: int  # the pinned version
    since: int | None  # the last validated version the rows come after; None: every row
    batches: tuple[tuple[str, ...], ...]  # data file paths as the log lists them
    rows: int  # rows in those files, as the log counts them (an upper bound of the rows checked)
    after: Mapping[TopicPartition, int]  # per topic-partition, the offsets below this were validated
    why_every_row: str = ""  # why every row is read although a last validated version was given

    def line(self, checked: int) -> str:
        """What was checked, for the report: ``checked`` rows in so many batches, since which version."""
        if self.since is not None and self.since >= self.version:
            return f"{self.table}: no row to check, v{self.version} is the last validated version"
        scope = (f"every row of v{self.version}" if self.since is None
                 else f"rows committed after v{self.since} (the last validated version) up to v{self.version}")
        batches = "" if len(self.batches) <= 1 else f", in {len(self.batches)} batches"
        said = f"{self.table}: {checked:,} rows checked, {scope}{batches}"
        return said + (f" ({self.why_every_row})" if self.why_every_row else "")


def rows_to_check(table: PinnedTable, since: int | None, batch_rows: int) -> RowsToCheck:
    """The files and offsets of ``table``'s rows committed after version ``since`` (every row when None, when
    ``since`` is not older than the pinned version it is none), in batches of at most ``batch_rows`` rows
    (a larger file alone)."""
    actions = pa.table(table.table.get_add_actions(flatten=True)).select(
        ["path", "modification_time", "num_records"]).to_pylist()
    files = [a for a in actions if a["path"] not in table.left_out]
    after: dict[TopicPartition, int] = {}
    why = ""
    if since is not None and since >= table.version:
        files = []
    elif since is not None:
        try:
            written_after, after = _validated(table, since)
        except (DeltaError, OSError, ValueError) as exc:
            why = f"v{since} cannot be read ({exc})"
            since = None
        else:
            files = [a for a in files if _millis(a["modification_time"]) >= written_after]
    return RowsToCheck(table.name, table.version, since, _batches(files, batch_rows),
                       sum(int(a["num_records"] or 0) for a in files), after, why)


def _validated(table: PinnedTable, since: int) -> tuple[int, dict[TopicPartition, int]]:
    """When version ``since`` was committed (epoch ms, less the slack), and the end of each topic-partition's
    offsets it claimed."""
    info = commit_info(table.location, since)
    if info is None or info.get("timestamp") is None:
        raise ValueError("its commit has no timestamp in the log")
    earlier = table.at(since)
    claims = earlier.claims(table.known_claims())
    ends = {tp: max(end for _, end in runs) for tp, runs in claims.items() if runs}
    return int(info["timestamp"]) - WRITTEN_BEFORE_COMMIT_S * 1000, ends


def _millis(value: object) -> int:
    """An add action's modification time in epoch milliseconds (pyarrow gives a datetime, or a number)."""
    if isinstance(value, datetime):
        return int(value.timestamp() * 1000)
    return int(str(value))


def _batches(files: Sequence[Mapping[str, object]], batch_rows: int) -> tuple[tuple[str, ...], ...]:
    batches: list[tuple[str, ...]] = []
    current: list[str] = []
    rows = 0
    for action in sorted(files, key=lambda a: str(a["path"])):
        count = int(action["num_records"] or 0)  # type: ignore[call-overload]
        if current and rows + count > batch_rows:
            batches.append(tuple(current))
            current, rows = [], 0
        current.append(str(action["path"]))
        rows += count
    if current:
        batches.append(tuple(current))
    return tuple(batches)


def frames(table: PinnedTable, check: RowsToCheck, columns: Sequence[str]) -> Iterator[pd.DataFrame]:
    """One pandas frame per batch of ``check``: ``columns`` only, the rows already validated dropped; strings
    read as Parquet stores them, dictionary-encoded, so they become categories without being decoded."""
    whole = table.dataset([f.name for f in table.dataset().schema if f.name in columns and is_string(f.type)])
    by_path = {fragment.path: fragment for fragment in whole.get_fragments()}
    for paths in check.batches:
        part = ds.FileSystemDataset([by_path[p] for p in paths if p in by_path], whole.schema, whole.format,
                                    whole.filesystem)
        with table.location.reaching():
            data = part.to_table(columns=list(columns))
        frame: pd.DataFrame = _after(data, check.after).to_pandas(strings_to_categorical=True)
        yield frame


def _after(data: pa.Table, after: Mapping[TopicPartition, int]) -> pa.Table:
    """The rows of ``data`` at or beyond ``after``'s offset for their topic-partition (all of a topic-partition
    ``after`` does not name)."""
    if not after or data.num_rows == 0:
        return data
    topic = data.column("topic")
    if pa.types.is_dictionary(topic.type):
        topic = topic.cast(topic.type.value_type)
    encoded = pc.dictionary_encode(topic).combine_chunks()
    code = {name: i for i, name in enumerate(encoded.dictionary.to_pylist())}
    keys = (encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64) << 32) | data.column(
        "partition").to_numpy().astype(np.int64)
    known = sorted(((code[t] << 32) | p, end) for (t, p), end in after.items() if t in code)
    if not known:
        return data
    known_keys = np.array([k for k, _ in known], dtype=np.int64)
    known_ends = np.array([e for _, e in known], dtype=np.int64)
    at = np.minimum(np.searchsorted(known_keys, keys), len(known_keys) - 1)
    floor = np.where(known_keys[at] == keys, known_ends[at], np.iinfo(np.int64).min)
    return data.filter(pa.array(data.column("offset").to_numpy() >= floor))
