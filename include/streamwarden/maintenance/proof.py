"""The proof that one compaction commit kept every row, and the revert when it did not.

A compaction commit (version ``v``) removes files and adds files, changing no data. Proof:

1. The removed files are the add actions of version ``v - 1`` missing from version ``v``; the added
   files the other way round (two consecutive versions differ by exactly that commit).
2. Each file of both sets is read and checked against its log entry (size, rows, offset range): a file
   replaced outside the log is a problem, named by path.
3. The :mod:`~streamwarden.maintenance.fingerprint` of the removed files and of the added files must be
   equal for every topic-partition: rows, lowest and highest offset, and the order-independent row hash.

A failed proof is reverted (:func:`revert`): one new commit removes the added files and adds the removed
ones back with their log entries, so the partition is as it was at ``v - 1`` while every batch the stream
committed since stays (a ``restore`` to ``v - 1`` would drop those and leave their offsets marked as
committed: data loss).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
from deltalake import CommitProperties, DeltaTable
from deltalake.transaction import AddAction, RemoveAction
from pyarrow import fs  # type: ignore[import-untyped, unused-ignore]

from streamwarden.failures import IntegrityError
from streamwarden.maintenance.fingerprint import Fingerprint, LoggedFile, fingerprint
from streamwarden.tables.commits import commit_info, commits_after
from streamwarden.tables.location import TableLocation
from streamwarden.tables.statistics import json_value

REVERT_OF = "streamwarden.revert_of"


@dataclass(frozen=True)
class Proof:
    """The outcome of proving compaction commit ``version`` of ``table``."""

    table: str
    version: int
    before: Fingerprint
    after: Fingerprint
    differences: tuple[str, ...]
    added_paths: tuple[str, ...] = ()  # the files the commit added

    @property
    def holds(self) -> bool:
        return not self.differences

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table, "version": self.version, "holds": self.holds,
                "differences": list(self.differences), "rows_before": self.before.rows,
                "rows_after": self.after.rows, "files_removed": self.before.files, "files_added": self.after.files,
                "bytes_removed": self.before.bytes, "bytes_added": self.after.bytes,
                "topic_partitions": self.after.to_json()}


def filesystem(location: TableLocation) -> fs.FileSystem:
    """The table's files (local or on an object store) as a pyarrow filesystem rooted at the table, so that
    paths are as the log records them."""
    store, path = location.filesystem()
    return fs.SubTreeFileSystem(path, store)


def prove(location: TableLocation, version: int) -> Proof:
    """Steps 1-3 for compaction commit ``version``."""
    before, after = location.open(version - 1), location.open(version)
    old, new = _files(before), _files(after)
    removed = [old[path] for path in sorted(set(old) - set(new))]
    added = [new[path] for path in sorted(set(new) - set(old))]
    schema = _file_schema(after)
    files = filesystem(location)
    constants = _partition(removed + added, old | new)
    printed_before = fingerprint((_logged(a) for a in removed), files, schema, constants)
    printed_after = fingerprint((_logged(a) for a in added), files, schema, constants)
    differences = [*printed_before.problems, *printed_after.problems, *printed_before.differences(printed_after)]
    if len({json.dumps(a["partition"], sort_keys=True) for a in removed + added}) > 1:
        differences.append("the commit spans more than one partition")
    return Proof(location.name, version, printed_before, printed_after, tuple(differences),
                 tuple(str(a["path"]) for a in added))


def file_problems(location: TableLocation, version: int, partition: dict[str, str | None]) -> list[str]:
    """The files of ``partition`` at ``version`` whose size, rows or offsets disagree with the log."""
    table = location.open(version)
    files = [_logged(a) for a in _files(table).values() if (a["partition"] or {}) == partition]
    return fingerprint(files, filesystem(location), _file_schema(table), partition).problems


def revert(location: TableLocation, version: int, marks: dict[str, str]) -> int:
    """Undo compaction commit ``version`` by a new commit (removed files back, added files out); its version.

    Only a commit that carries ``marks`` (the run and the partition) and changes no data is undone: anything
    else at that version is another writer's (the stream's batch) and is refused as INTEGRITY, untouched."""
    info = commit_info(location, version) or {}
    theirs = {key: info.get(key) for key in marks}
    if theirs != marks or info.get("operation") != "OPTIMIZE":
        raise IntegrityError(
            f"table {location.name}: refusing to revert version {version}: it is not this run's compaction commit "
            f"(operation {info.get('operation')!r}, marks {theirs}); nothing was reverted",
            details={"table": location.name, "version": version, "expected": marks, "found": theirs})
    before, after = location.open(version - 1), location.open(version)
    old, new = _files(before), _files(after)
    now = int(time.time() * 1000)
    actions: list[AddAction | RemoveAction] = [
        RemoveAction(path, False, now, new[path]["size_bytes"], new[path]["partition"]) for path in set(new) - set(old)]
    actions += [AddAction(path, old[path]["size_bytes"], old[path]["partition"], old[path]["modification_time"],
                          False, json.dumps(_stats(old[path]))) for path in set(old) - set(new)]
    table = location.open()
    table.create_write_transaction(actions, mode="append", schema=table.schema(),
                                   partition_by=list(table.metadata().partition_columns) or None,
                                   commit_properties=CommitProperties(custom_metadata={REVERT_OF: str(version)}))
    return next(number for number, commit in commits_after(location, version)
                if commit.get(REVERT_OF) == str(version))


def _files(table: DeltaTable) -> dict[str, dict[str, Any]]:
    return {row["path"]: row for row in pa.table(table.get_add_actions(flatten=False)).to_pylist()}


def _file_schema(table: DeltaTable) -> pa.Schema:
    schema = pa.schema(table.schema().to_arrow())
    partitions = set(table.metadata().partition_columns)
    return pa.schema([f for f in schema if f.name not in partitions])


def _partition(actions: list[dict[str, Any]], every: dict[str, dict[str, Any]]) -> dict[str, str | None]:
    first = actions[0] if actions else next(iter(every.values()), {"partition": {}})
    return dict(first["partition"] or {})


def _logged(action: dict[str, Any]) -> LoggedFile:
    low, high = (action["min"] or {}).get("offset"), (action["max"] or {}).get("offset")
    return LoggedFile(action["path"], int(action["size_bytes"]), int(action["num_records"]),
                      None if low is None else int(low), None if high is None else int(high))


def _stats(action: dict[str, Any]) -> dict[str, Any]:
    return {"numRecords": action["num_records"], "minValues": _plain(action["min"] or {}),
            "maxValues": _plain(action["max"] or {}), "nullCount": action["null_count"] or {}}


def _plain(values: dict[str, Any]) -> dict[str, Any]:
    return {name: _plain(value) if isinstance(value, dict) else json_value(value) for name, value in values.items()}
