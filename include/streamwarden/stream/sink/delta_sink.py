"""Exactly-once commit of a micro-batch's Parquet files into a Delta table, keyed by Kafka offset ranges.

The executors write the files; the driver commits them to the table's Delta log. The table is a local
folder or a folder on an object store (:class:`~streamwarden.tables.location.TableLocation`): the executors
write, and the driver lists and reads, through the same pyarrow filesystem
(:mod:`~streamwarden.stream.sink.batch_files`; no Hadoop connector), and the driver commits with delta-rs.
Layout::

    <output_root>/<table>/_delta_log/...                                     the Delta log
    <output_root>/<table>/batch-<key>/<partition dirs>/part-*.parquet        one folder per batch

``key`` is the first 16 hex digits of sha256 over the canonical JSON of the batch's planned ranges and the
id of the streaming query that planned them (``id`` in ``<checkpoint>/metadata``, which Spark writes when a
new checkpoint first starts and keeps for its life). A replayed batch writes to the folder it wrote to
before, so its overwrite clears its own half-written attempt; the same ranges planned by a new checkpoint
(the replay after a recovery restored the tables to an earlier version) go to a new folder, so the files
that the versions before the restore reference are never overwritten, and those versions stay readable.
The folders are not hidden (``_``), so a full vacuum (table maintenance) deletes the files of batches that
crashed before their commit.

Protocol for one batch and one table:

1. ``plan()`` takes the batch's planned ranges and its query id, reads which offsets the table holds
   (:mod:`streamwarden.tables.committed`) and subtracts them from the planned ranges. The sink keeps what
   it read and what its own commits added: while the table's version is the one its last read or commit
   left, no other commit landed, and the log is not read again (with many topic-partitions those reads
   grew to seconds per batch as the log grew). Fully committed: the job skips the write. Otherwise the
   executors write the rows of the offsets not committed yet (``already_committed`` left out) into
   ``plan.write_dir``, after clearing what an earlier, uncommitted attempt of the same batch in the same
   checkpoint left there, and nothing else (the key names the checkpoint's query).
2. ``commit()`` lists the written Parquet files through the table's pyarrow filesystem (``_SUCCESS``,
   ``.crc``, files under ``_``/``.`` folders and zero-row files are left out), takes the partition values
   from the folder names (which must be the table's partition columns, in order) and reads each file's
   size, row count and column statistics from the listing and its footer.
3. Re-reads the committed offsets from the newest version, from the log when it moved since step 1
   (offsets of the batch committed by another writer since step 1 are an INTEGRITY error,
   :class:`ConcurrentWriterError`) and builds the transactions
   that extend them by the batch's ``covers`` and count the commit on each topic-partition it covers
   (:mod:`streamwarden.tables.committed`).
4. Commits the files (``AddAction``) and the transactions in one Delta commit, built on the snapshot
   step 3 read; its commit info names the batch id, key, ranges and query id, and each file's content hash
   (:mod:`streamwarden.tables.content`: the file read once more, whole). A commit of another writer
   on one of the batch's topic-partitions since that snapshot makes delta-rs fail this one (the same app
   id): :class:`ConcurrentWriterError` too. Before this step the batch is invisible to every Delta reader;
   after it, whole.

A crash before step 4 leaves files no Delta reader sees, and the replayed batch writes them again. A crash
after step 4 (but before Spark's checkpoint commit) replays a batch whose offsets the table holds: step 1
skips it. Two tables cannot commit together: each commits its own batch, so a crash between them is
finished on replay by the table that missed it.

Test-only kill points (:func:`streamwarden.testing.faults.chaos_point`): ``before_commit`` (files written,
not committed) and ``after_commit`` (this table committed; the next table not yet).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import PurePosixPath
from urllib.parse import unquote

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
from deltalake import CommitProperties, DeltaTable
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import AddAction, RemoveAction
from pyarrow import fs  # type: ignore[import-untyped, unused-ignore]

from streamwarden.failures import IntegrityError
from streamwarden.tables.commit_rate import RANGES_KEY
from streamwarden.tables.committed import Runs, TopicPartition, partitions_of
from streamwarden.tables.content import file_digest, hashes_metadata
from streamwarden.tables.location import TableLocation
from streamwarden.tables.ranges import (
    IntervalIndex,
    OffsetRanges,
    batch_key,
    canonical_ranges,
    committed_within,
    ranges_to_json,
    uncommitted,
)
from streamwarden.tables.statistics import file_statistics
from streamwarden.testing.faults import chaos_point

log = logging.getLogger("streamwarden.stream.sink")
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
"""The folder value of a null partition value (Hive's, as Spark writes it)."""


class ConcurrentWriterError(IntegrityError):
    """Another writer committed offsets to the table while this batch was being written."""


@dataclass(frozen=True)
class BatchPlan:
    """What one table must commit of one batch."""

    table: str
    batch_id: int
    key: str
    ranges: OffsetRanges
    covers: IntervalIndex  # planned minus already committed: what this batch newly commits
    already_committed: IntervalIndex
    write_dir: str  # the batch folder: a local path, or its object-store URI
    query_id: str | None = None  # the streaming query (checkpoint) that planned the batch; part of the key

    @property
    def fully_committed(self) -> bool:
        """Every planned offset is already in the table: nothing to write."""
        return not self.covers


@dataclass(frozen=True)
class CommitResult:
    """What a commit did: the table version it made, the files and rows it added."""

    table: str
    batch_id: int
    version: int
    files: int
    rows: int
    seconds: float
    covers: IntervalIndex = field(default_factory=dict)


class DeltaSink:
    """The exactly-once commit of one output table (one writer per table: the checkpoint lease)."""

    def __init__(self, location: TableLocation, schema: pa.Schema, partition_by: list[str]) -> None:
        self.location = location
        self.schema = schema
        self.partition_by = partition_by
        self.table: DeltaTable = location.create(schema, partition_by)
        self._known = Runs()  # the runs of the partitions read so far, as of version _known_version
        self._known_version: int | None = None

    def _runs(self, partitions: list[TopicPartition]) -> Runs:
        """The runs of ``partitions`` at the table's current version (a copy): read from the log, or known
        from an earlier read or this sink's own commit when the version has not moved since."""
        version = self.table.version()
        if self._known_version != version:
            self._known, self._known_version = Runs(), version
        missing = [tp for tp in partitions if tp not in self._known.by_partition]
        if missing:
            read = Runs.read(self.table, missing)
            self._known.by_partition.update(read.by_partition)
            self._known.commits.update(read.commits)
        return Runs({tp: list(self._known.by_partition[tp]) for tp in partitions},
                    {tp: self._known.commits[tp] for tp in partitions})

    @property
    def name(self) -> str:
        return self.location.name

    def plan(self, ranges: OffsetRanges, batch_id: int, query_id: str | None = None) -> BatchPlan:
        """Step 1: what of ``ranges`` this table still has to commit.

        ``query_id`` is the id of the streaming query whose checkpoint planned the batch (the job always
        gives it, :class:`~streamwarden.stream.batch_writer.DeltaBatchWriter`): the batch folder is keyed by
        it and the ranges. ``None`` keys the folder by the ranges alone (tools and tests outside a stream)."""
        ranges = canonical_ranges(ranges)
        with self.location.reaching():
            self.table.update_incremental()
        committed = self._runs(partitions_of(ranges)).index()
        key = batch_key(ranges, query_id)
        return BatchPlan(self.name, batch_id, key, ranges, uncommitted(ranges, committed),
                         committed_within(ranges, committed), f"{self.location.uri}/{batch_folder(key)}",
                         query_id)

    def commit(self, plan: BatchPlan) -> CommitResult:
        """Steps 2-4: commit the files written to ``plan.write_dir`` with the offsets they cover.

        The store unreachable at any step is an ENVIRONMENT failure; the replay commits the batch, or skips
        it when the commit landed after all (step 1)."""
        if plan.fully_committed:
            # write_dir may hold the files of the commit that covered these offsets: never add them twice
            raise ValueError(f"table {self.name}: batch {plan.batch_id} is fully committed already; skip its write")
        with self.location.reaching():
            return self._commit(plan)

    def discard_written(self, plan: BatchPlan) -> None:
        """Remove the batch folder of ``plan`` (what an earlier attempt wrote), for a batch that writes nothing
        to this table: step 2 must find no files of that attempt."""
        with self.location.reaching():
            store, table_path = self.location.filesystem()
            folder = f"{table_path}/{batch_folder(plan.key)}"
            if store.get_file_info(folder).type != fs.FileType.NotFound:
                store.delete_dir(folder)

    def _commit(self, plan: BatchPlan) -> CommitResult:
        started = time.monotonic()
        store, table_path = self.location.filesystem()
        files = _written_files(store, f"{table_path}/{batch_folder(plan.key)}")
        written = [self._add_action(store, table_path, info) for info in files]
        actions: list[AddAction | RemoveAction] = [action for action in written if action is not None]
        hashes = hashes_metadata({action.path: file_digest(store, f"{table_path}/{action.path}")
                                  for action in actions if isinstance(action, AddAction)})
        self.table.update_incremental()
        runs = self._runs(partitions_of(plan.ranges))
        if uncommitted(plan.ranges, runs.index()) != plan.covers:
            raise ConcurrentWriterError(
                f"table {self.name}: offsets of batch {plan.batch_id} were committed by another writer while it "
                "was written; two streams write to the same output root",
                details={"planned": ranges_to_json(plan.ranges)})
        transactions = runs.extend(plan.covers)
        chaos_point("before_commit")
        metadata = {"streamwarden.batch_id": str(plan.batch_id), "streamwarden.batch_key": plan.key,
                    RANGES_KEY: json.dumps(ranges_to_json(plan.ranges), sort_keys=True)}
        if plan.query_id is not None:
            metadata["streamwarden.query_id"] = plan.query_id
        metadata |= hashes
        properties = CommitProperties(app_transactions=transactions, custom_metadata=metadata)
        try:
            self.table.create_write_transaction(actions, mode="append", schema=self.schema,
                                                partition_by=self.partition_by or None,
                                                commit_properties=properties)
        except CommitFailedError as exc:
            raise ConcurrentWriterError(
                f"table {self.name}: the commit of batch {plan.batch_id} lost to another writer's commit on the "
                f"same topic-partitions; two streams write to the same output root: {exc}",
                details={"planned": ranges_to_json(plan.ranges)}) from exc
        chaos_point("after_commit")
        before = self.table.version()
        self.table.update_incremental()
        if self.table.version() == before + 1:  # this commit alone: the runs it extended are the log's now
            self._known.by_partition.update(runs.by_partition)
            self._known.commits.update(runs.commits)
            self._known_version = self.table.version()
        rows = sum(json.loads(a.stats)["numRecords"] for a in actions if isinstance(a, AddAction))
        return CommitResult(self.name, plan.batch_id, self.table.version(), len(actions), rows,
                            time.monotonic() - started, plan.covers)

    def _add_action(self, store: fs.FileSystem, table_path: str, info: fs.FileInfo) -> AddAction | None:
        """The action adding the file ``info`` (under ``table_path`` on ``store``), or None for a file without rows."""
        statistics = file_statistics(info.path, None, store)
        if statistics["numRecords"] == 0:  # e.g. the one file Spark writes for an empty unpartitioned write
            return None
        relative = PurePosixPath(info.path).relative_to(table_path)
        folders = [part.partition("=") for part in relative.parts[1:-1]]
        if [name for name, _, _ in folders] != self.partition_by or not all(equals for _, equals, _ in folders):
            # delta-rs takes any partition values; a missing one would silently read back as null
            raise IntegrityError(f"table {self.name}: {relative} is not in folders of the partition columns "
                                 f"{self.partition_by} (name=value, in that order)", details={"file": info.path})
        values = {name: None if value == HIVE_NULL else unquote(value) for name, _, value in folders}
        modified = info.mtime if info.mtime is not None else datetime.now(UTC)
        return AddAction(str(relative), info.size, values, int(modified.timestamp() * 1000), True,
                         json.dumps(statistics))


def batch_folder(key: str) -> str:
    """The folder of one batch's files in its table."""
    return f"batch-{key}"


def _written_files(store: fs.FileSystem, folder: str) -> list[fs.FileInfo]:
    """The Parquet files under ``folder`` (none when it is missing), leaving out hidden and ``_`` folders."""
    found = store.get_file_info(fs.FileSelector(folder, allow_not_found=True, recursive=True))
    return sorted((info for info in found if info.type == fs.FileType.File and info.path.endswith(".parquet")
                   and not any(part.startswith(("_", "."))
                               for part in PurePosixPath(info.path).relative_to(folder).parts)),
                  key=lambda info: info.path)
