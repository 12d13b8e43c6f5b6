"""The tables a validation run reads, each pinned at one Delta version, with the offsets its log claims.

Every check of a run reads the same versions: a table is opened once, at its newest version (or one given),
and that :class:`PinnedTable` is passed around. What a table *claims* is what its log records as committed
(the runs kept as app transactions, :mod:`streamwarden.tables.committed`); the rows are read from the files
that version lists, never from a listing of the folder.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pyarrow.dataset as ds  # type: ignore[import-untyped, unused-ignore]
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from streamwarden.failures import ConfigError
from streamwarden.settings import Settings
from streamwarden.tables.commits import commit_info
from streamwarden.tables.committed import Runs, TopicPartition
from streamwarden.tables.location import TableLocation
from streamwarden.tables.ranges import Interval
from streamwarden.tables.reading import dataset
from streamwarden.tables.storage import Chooser, StorageCheck, check_files


@dataclass
class PinnedTable:
    """One table at one version, and the claims of its log for the topic-partitions asked so far."""

    location: TableLocation
    table: DeltaTable
    committed_at: float | None  # epoch seconds of the pinned version's commit (None when unknown)
    _runs: dict[TopicPartition, list[Interval]] = field(default_factory=dict)
    left_out: frozenset[str] = frozenset()  # listed files storage lacks or holds damaged: not read

    def check_storage(self, choose: Chooser | None = None) -> StorageCheck:
        """The pinned version's data files storage lacks or holds at another size, and of the others those
        ``choose`` picks whose bytes changed (:mod:`~streamwarden.tables.storage`); they are left out of
        :meth:`dataset` from then on, so the checks read the rest and the offsets those files held show as a
        GAP."""
        checked = check_files(self.table, self.location, choose)
        self.left_out = frozenset(problem.path for problem in checked.problems)
        return checked

    @property
    def name(self) -> str:
        return self.location.name

    @property
    def version(self) -> int:
        return self.table.version()

    def dataset(self, dictionary_columns: Sequence[str] = (), leave_out: Collection[str] = ()) -> ds.Dataset:
        """The rows of the pinned version as a pyarrow dataset (only the files its log lists, but those
        :meth:`check_storage` found damaged and those in ``leave_out``; ``dictionary_columns`` read
        dictionary-encoded)."""
        with self.location.reaching():
            return dataset(self.table, self.location, dictionary_columns, leave_out=self.left_out | set(leave_out))

    def paths(self) -> list[str]:
        """The data files the pinned version lists."""
        with self.location.reaching():
            return [str(path) for path in self.table.get_add_actions(flatten=False).column("path").to_pylist()]

    def columns(self) -> list[str]:
        return [f.name for f in self.table.schema().fields]

    def claims(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, list[Interval]]:
        """The committed offsets of each of ``partitions`` at the pinned version (sorted, disjoint; [] when
        none), read from the log once per topic-partition."""
        partitions = sorted(set(partitions))
        unread = [tp for tp in partitions if tp not in self._runs]
        if unread:
            with self.location.reaching():
                index = Runs.read(self.table, unread).index()
            self._runs.update({(t, p): index.get(t, {}).get(p, []) for t, p in unread})
        return {tp: self._runs[tp] for tp in partitions}

    def known_claims(self) -> dict[TopicPartition, list[Interval]]:
        """The claims read so far (every topic-partition a check asked about)."""
        return dict(self._runs)

    def at(self, version: int) -> PinnedTable:
        """The same table at another version."""
        table = self.location.open(version)
        return PinnedTable(self.location, table, _committed_at(self.location, table))


def pin(settings: Settings, names: Iterable[str], versions: Mapping[str, int] | None = None,
        as_of: datetime | None = None) -> list[PinnedTable]:
    """Each named table that exists, at ``versions[name]``, at its newest version committed by ``as_of``, or at
    its newest version (absent tables are left out). A version the table does not have is a CONFIG error
    naming the table and its newest version."""
    pinned = []
    for name in names:
        location = TableLocation.of(settings, name)
        if not location.exists():
            continue
        table = location.open()
        wanted = (versions or {}).get(name)
        if wanted is not None and wanted != table.version():
            table = _at_version(location, table, wanted)
        elif as_of is not None:
            table = _as_of(location, table, as_of)
        pinned.append(PinnedTable(location, table, _committed_at(location, table)))
    return pinned


def _at_version(location: TableLocation, newest: DeltaTable, version: int) -> DeltaTable:
    if version > newest.version():
        raise ConfigError(f"{location.name} has no version {version}: its newest is {newest.version()}")
    try:
        return location.open(version)
    except (DeltaError, OSError) as exc:
        raise ConfigError(f"{location.name} version {version} cannot be read (its log entry expired, or a vacuum "
                          f"deleted its files; newest {newest.version()}): {exc}") from None


def _as_of(location: TableLocation, newest: DeltaTable, moment: datetime) -> DeltaTable:
    try:
        with location.reaching():
            newest.load_as_version(moment)
    except (DeltaError, OSError, ValueError) as exc:
        raise ConfigError(f"{location.name} has no version committed by {moment.isoformat()}: {exc}") from None
    committed = _committed_at(location, newest)
    if committed is not None and committed > moment.timestamp():  # delta-rs falls back to the first version
        raise ConfigError(f"{location.name} has no version committed by {moment.isoformat()}: its first is from "
                          f"{datetime.fromtimestamp(committed, UTC).isoformat()}")
    return newest


def _committed_at(location: TableLocation, table: DeltaTable) -> float | None:
    """When the pinned version was committed, from its own log entry (delta-rs's history numbers its entries
    from the snapshot, one off beside the writing stream: :mod:`streamwarden.tables.commits`)."""
    info = commit_info(location, table.version())
    return None if info is None or info.get("timestamp") is None else float(info["timestamp"]) / 1000.0
