"""Restoring a table to an earlier version together with the offsets it claims: what recovery rolls back.

A Delta ``restore`` alone brings back the files of version V but not the offsets the table claims: app
transactions keep their newest values, so a stream replaying from V's offsets would find them committed and
skip them, and their rows would be lost without a word (docs/delta-rs-behaviour.md). Here one commit does
both, so a kill -9 leaves the table either untouched or restored:

1. every topic-partition whose claims moved after V is found in the commit infos since V (each of the
   stream's commits names its offset ranges, each restore its partitions); a log cleaned up past V is
   refused, since a partition could be missed;
2. a commit of the same recovery (``streamwarden.recovery``) already in the history since V means it is
   done: a re-run after a kill -9 changes nothing and reports it;
3. V is restored with the transactions of :func:`~streamwarden.tables.committed.rewind` and the recovery
   id in one commit;
4. the result is checked before it is reported: the new version holds V's files and V's claims.

Example::

    >>> restored = restore_table(TableLocation.of(settings, "session_rows"), 41, "recovery-20261124T1200")
    >>> restored.undone   # offsets no longer claimed, per topic and partition
    {'sites-0': {0: [(1200, 1450)]}}
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from deltalake import CommitProperties, DeltaTable

from streamwarden.failures import ConfigError, IntegrityError
from streamwarden.tables.commit_rate import RANGES_KEY
from streamwarden.tables.commits import commits_after
from streamwarden.tables.committed import Runs, TopicPartition, rewind
from streamwarden.tables.location import TableLocation
from streamwarden.tables.ranges import IntervalIndex, index_to_json, subtract_interval

RECOVERY_KEY = "streamwarden.recovery"
PARTITIONS_KEY = "streamwarden.partitions"


@dataclass(frozen=True)
class Restored:
    """A table restored to ``target`` by the commit at ``version`` (``already``: by an earlier run)."""

    table: str
    target: int
    version: int
    undone: IntervalIndex
    already: bool

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table, "target": self.target, "version": self.version, "already": self.already,
                "undone": index_to_json(self.undone)}


def changes_since(location: TableLocation, table: DeltaTable, target: int, recovery: str
                  ) -> tuple[list[TopicPartition], int | None]:
    """Steps 1 and 2: the topic-partitions whose claims the commits after ``target`` moved (up to ``table``'s
    version), and the version of ``recovery``'s restore commit among them (None when it has not committed).
    The commits are read from the log by version (:mod:`streamwarden.tables.commits`)."""
    newest = table.version()
    history = [{**info, "version": number} for number, info in commits_after(location, target, newest)]
    if {entry["version"] for entry in history} != set(range(target + 1, newest + 1)):
        raise ConfigError(f"table at {table.table_uri}: the commits after version {target} are no longer all in "
                          f"its log (cleaned up); it cannot be restored there with its offsets",
                          details={"target": target, "newest": newest})
    partitions: set[TopicPartition] = set()
    done: int | None = None
    for entry in history:
        if RANGES_KEY in entry:
            partitions |= {(topic, int(p)) for topic, parts in json.loads(entry[RANGES_KEY]).items() for p in parts}
        if PARTITIONS_KEY in entry:
            partitions |= {(topic, int(p)) for topic, p in json.loads(entry[PARTITIONS_KEY])}
        if entry.get(RECOVERY_KEY) == recovery:
            done = int(entry["version"])
    return sorted(partitions), done


def undone_offsets(now: Runs, then: Runs) -> IntervalIndex:
    """The offsets ``now`` claims that ``then`` does not, per topic and partition."""
    undone: IntervalIndex = {}
    held = then.index()
    for topic, parts in now.index().items():
        for partition, intervals in parts.items():
            lost = [piece for interval in intervals
                    for piece in subtract_interval(interval, held.get(topic, {}).get(partition, []))]
            if lost:
                undone.setdefault(topic, {})[partition] = lost
    return undone


@dataclass(frozen=True)
class ClaimedVersion:
    """A table at one version with the offsets it claims on the partitions a restore touches: what the restore
    starts from, restores to, and checks against."""

    table: DeltaTable
    claims: Runs

    @classmethod
    def read(cls, location: TableLocation, partitions: list[TopicPartition],
             version: int | None = None) -> ClaimedVersion:
        """The table at ``version`` (None: its newest) and its claims on ``partitions``."""
        table = location.open() if version is None else location.open(version)
        return cls(table, Runs.read(table, partitions))

    @property
    def version(self) -> int:
        return int(self.table.version())


def restore_table(location: TableLocation, target: int, recovery: str) -> Restored:
    """Steps 1-4 on one table: restore ``target`` with its claims, as recovery ``recovery``."""
    with location.reaching():
        table = location.open()
        partitions, done = changes_since(location, table, target, recovery)
        then = ClaimedVersion.read(location, partitions, target)
        if done is not None:  # a re-run: what the restore commit undid, from the version before it
            before = ClaimedVersion.read(location, partitions, done - 1)
            return Restored(location.name, target, done, undone_offsets(before.claims, then.claims), already=True)
        now = ClaimedVersion(table, Runs.read(table, partitions))
        table.restore(target, commit_properties=CommitProperties(
            app_transactions=rewind(now.claims, then.claims),
            custom_metadata={RECOVERY_KEY: recovery, PARTITIONS_KEY: json.dumps([list(tp) for tp in partitions])}))
        restored = ClaimedVersion.read(location, partitions)
        _check(location.name, restored, then)
    return Restored(location.name, target, restored.version, undone_offsets(now.claims, then.claims), already=False)


def _check(name: str, restored: ClaimedVersion, then: ClaimedVersion) -> None:
    """Step 4: the restored version holds the target's files and claims; INTEGRITY otherwise."""
    if set(restored.table.file_uris()) != set(then.table.file_uris()):
        raise IntegrityError(f"table {name}: version {restored.version} was to restore version {then.version} "
                             "but holds other files", details={"table": name, "target": then.version})
    if restored.claims.index() != then.claims.index():
        raise IntegrityError(f"table {name}: version {restored.version} claims offsets "
                             f"{restored.claims.index()} where version {then.version} claims {then.claims.index()}",
                             details={"table": name, "target": then.version})
