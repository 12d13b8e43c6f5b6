"""Compaction of one table, one partition per Delta commit, each commit proven before the next.

Protocol for one partition (the table's maintenance lock is held, :mod:`streamwarden.tables.lock`):

1. Check the content hash of every file of the partition at the version read against the one recorded when
   it was committed (:mod:`streamwarden.tables.content`): a changed file is ``INTEGRITY``, and nothing is
   compacted (a compaction would copy the change into a new file, and the row proof would agree with it).
   Write the journal ``<maintenance>/pending/<table>.json``: the partition, the version read, the run.
2. ``optimize.compact`` of that partition only (a data-change-free commit carrying the run and the
   partition in its commit info). A conflict with a concurrent commit is retried here, never in the
   stream: the stream only appends, and a compaction does not conflict with appends.
3. Find the commit: the one after the version read that carries the run's and the partition's marks, read
   from the log by version number (:mod:`streamwarden.tables.commits`), since the stream commits beside it.
4. Prove it (:mod:`.proof`); a failed proof is reverted (only ever a commit carrying those marks) and raised
   as ``INTEGRITY`` after the revert.
5. Record the new files' content hashes in the table's hash manifest; delete the journal.

A crash before step 2 commits leaves Parquet files no version references (vacuumed later); a crash after
it leaves the journal, and the next run starts with :func:`finish_pending`: steps 3-5 for the journal's
partition. Either way a crash loses at most one partition's work, and no commit goes unproven.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
from deltalake import CommitProperties, DeltaTable, WriterProperties
from deltalake.exceptions import CommitFailedError, DeltaError

from streamwarden.atomic import read_json, write_json_atomic
from streamwarden.failures import IntegrityError
from streamwarden.maintenance.plan import PartitionPlan
from streamwarden.maintenance.proof import Proof, file_problems, prove, revert
from streamwarden.tables.commits import commits_after
from streamwarden.tables.content import check_content, file_digest, fold_manifest, recorded_hashes
from streamwarden.tables.location import TableLocation
from streamwarden.tables.storage import held_offsets
from streamwarden.testing.faults import chaos_point

log = logging.getLogger("streamwarden.maintenance")
RUN_MARK = "streamwarden.maintenance_run"
PARTITION_MARK = "streamwarden.partition"
COMMIT_ATTEMPTS = 5
_COMPRESSION: dict[str, Literal["ZSTD", "SNAPPY", "GZIP", "LZ4_RAW", "UNCOMPRESSED"]] = {
    "zstd": "ZSTD", "snappy": "SNAPPY", "gzip": "GZIP", "lz4": "LZ4_RAW", "none": "UNCOMPRESSED"}


@dataclass(frozen=True)
class Compaction:
    """What compacting one partition did, with its proof."""

    table: str
    partition: str
    version: int | None  # None: nothing to compact after all (no commit)
    files_removed: int
    files_added: int
    bytes_removed: int
    bytes_added: int
    rows: int
    seconds: float
    proof: dict[str, Any] = field(default_factory=dict)
    earlier_run: bool = False  # what a crashed run committed, proven by this one

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Journal:
    """The partition being compacted, written before its commit: what a crashed run left to prove."""

    table: str
    partition: str
    read_version: int
    run_id: str
    started_at: str

    @classmethod
    def path(cls, folder: Path, table: str) -> Path:
        return folder / "pending" / f"{table}.json"


def new_run_id() -> str:
    """A unique mark for one maintenance run's commits."""
    return uuid.uuid4().hex[:16]


def compact_partition(location: TableLocation, partition: PartitionPlan, *, folder: Path, run_id: str,
                      target_size: int, compression: str) -> Compaction:
    """Steps 1-5 for ``partition``."""
    started = time.monotonic()
    table = location.open()
    _refuse_changed_files(location, table, dict(partition.values), partition.label)
    journal = Journal(location.name, partition.label, table.version(), run_id, datetime.now(UTC).isoformat())
    write_json_atomic(Journal.path(folder, location.name), asdict(journal))
    properties = CommitProperties(custom_metadata={RUN_MARK: run_id, PARTITION_MARK: partition.label})
    writer = WriterProperties(compression=_COMPRESSION[compression])
    for attempt in range(1, COMMIT_ATTEMPTS + 1):
        chaos_point("before_compaction_commit")
        try:
            # one bin at a time: a task holds one target-sized file's rows, not one per core, beside the stream
            table.optimize.compact(partition_filters=partition.filters() or None, target_size=target_size,
                                   writer_properties=writer, commit_properties=properties, max_concurrent_tasks=1)
            break
        except CommitFailedError as exc:
            if attempt == COMMIT_ATTEMPTS:
                raise
            log.warning("%s %s: compaction commit conflicted (%s); retrying (%d/%d)", location.name,
                        partition.label, exc, attempt, COMMIT_ATTEMPTS)
            table = location.open()
        except DeltaError:
            _raise_if_files_disagree(location, journal, dict(partition.values))
            raise
    chaos_point("after_compaction_commit")
    return _prove_journal(location, journal, folder, started)


def finish_pending(location: TableLocation, folder: Path) -> Compaction | None:
    """Steps 3-5 for what a crashed run left in the journal (None when it left nothing)."""
    document = read_json(Journal.path(folder, location.name))
    if document is None:
        return None
    journal = Journal(**document)
    log.warning("%s: a maintenance run (%s) stopped while compacting %s; proving what it committed",
                location.name, journal.run_id, journal.partition)
    return replace(_prove_journal(location, journal, folder, time.monotonic()), earlier_run=True)


def _prove_journal(location: TableLocation, journal: Journal, folder: Path, started: float) -> Compaction:
    version = _find_commit(location, journal)
    if version is None:
        Journal.path(folder, location.name).unlink(missing_ok=True)
        return Compaction(location.name, journal.partition, None, 0, 0, 0, 0, 0, time.monotonic() - started)
    proof = prove(location, version)
    if not proof.holds:
        reverted = revert(location, version, {RUN_MARK: journal.run_id, PARTITION_MARK: journal.partition})
        Journal.path(folder, location.name).unlink(missing_ok=True)
        raise IntegrityError(
            f"table {location.name}, partition {journal.partition}: compaction commit {version} did not keep every "
            f"row; reverted by commit {reverted} (the partition is as it was at version {version - 1}). "
            + "; ".join(proof.differences[:5]),
            details={**proof.to_json(), "reverted_by": reverted, "partition": journal.partition})
    store, base = location.filesystem()
    with location.reaching():
        added = {path: file_digest(store, f"{base}/{path}") for path in proof.added_paths}
    fold_manifest(location, location.open().version(), added)
    Journal.path(folder, location.name).unlink(missing_ok=True)
    return _result(location.name, journal.partition, proof, time.monotonic() - started)


def _refuse_changed_files(location: TableLocation, table: DeltaTable, partition: dict[str, str | None],
                          label: str) -> None:
    """Step 1's content check: INTEGRITY, before any commit, when a file of the partition is not the one committed."""
    actions = [a for a in pa.table(table.get_add_actions(flatten=True)).to_pylist()
               if {k.removeprefix("partition."): v for k, v in a.items() if k.startswith("partition.")} == partition]
    checked = check_content(location, {str(a["path"]): int(a["size_bytes"]) for a in actions},
                            recorded_hashes(location, table.version()))
    if checked.unrecorded:
        log.warning("%s %s: %d files have no recorded content hash (committed before hashes were kept): not "
                    "checked", location.name, label, len(checked.unrecorded))
    if checked.unreadable:
        raise IntegrityError(
            f"table {location.name}, partition {label}: {len(checked.unreadable)} data file(s) cannot be read; "
            f"nothing was compacted. {'; '.join(f'{f.path}: {f.reason}' for f in checked.unreadable[:5])}. Restore "
            "their access or storage tier, or find the damage with validate_output and recover the table "
            "(recover_stream, target as_of).",
            details={"table": location.name, "partition": label, "version": table.version(),
                     "unreadable": [f.path for f in checked.unreadable]})
    if checked.problems:
        by_path = {str(a["path"]): a for a in actions}
        lines = [f"{p.path} (it held {held_offsets(by_path[p.path]).describe()}; {p.expected} recorded, {p.found} "
                 "found)" for p in checked.problems]
        raise IntegrityError(
            f"table {location.name}, partition {label}: {len(lines)} data file(s) changed since they were committed; "
            f"nothing was compacted. {'; '.join(lines[:5])}. Find the damage with validate_output, then restore "
            "the table to before the file was written (recover_stream, target as_of).",
            details={"table": location.name, "partition": label, "version": table.version(),
                     "changed": [p.path for p in checked.problems]})


def _raise_if_files_disagree(location: TableLocation, journal: Journal, partition: dict[str, str | None]) -> None:
    """A compaction that failed reading its files: INTEGRITY, naming them, when they disagree with the log."""
    problems = file_problems(location, journal.read_version, partition)
    if problems:
        raise IntegrityError(
            f"table {location.name}, partition {journal.partition}: files differ from what the Delta log says of "
            f"them (replaced or truncated outside the log); nothing was compacted. {'; '.join(problems[:5])}",
            details={"table": location.name, "partition": journal.partition, "problems": problems,
                     "version": journal.read_version})


def _find_commit(location: TableLocation, journal: Journal) -> int | None:
    """The version of the run's commit for the journal's partition, read from the log by number (the stream
    commits beside it: see :mod:`streamwarden.tables.commits`)."""
    for version, info in commits_after(location, journal.read_version):
        if info.get(RUN_MARK) == journal.run_id and info.get(PARTITION_MARK) == journal.partition:
            return version
    return None


def _result(table: str, partition: str, proof: Proof, seconds: float) -> Compaction:
    return Compaction(table, partition, proof.version, proof.before.files, proof.after.files, proof.before.bytes,
                      proof.after.bytes, proof.after.rows, seconds, proof.to_json())
