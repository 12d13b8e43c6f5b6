"""Which Kafka offsets a Delta table holds, kept in the table's own log as app transactions.

A Delta app transaction is a pair ``(app id, version)`` that the log keeps for ever: through checkpoints,
log clean-up, compaction and vacuum. Each topic-partition's committed offsets are a few *runs*, half-open
intervals ``[start, end)``; run ``k`` is two transactions, and a counter of the commits that recorded
offsets of the partition is a third::

    streamwarden:<topic>:<partition>:<k>:start -> start
    streamwarden:<topic>:<partition>:<k>:end   -> end
    streamwarden:<topic>:<partition>:commits   -> how many commits recorded offsets of the partition

A commit that continues a run raises its ``end``; one that starts elsewhere (a fresh checkpoint at
``latest``, a restart from explicit offsets) opens run ``k + 1``. Versions only grow, except in the one
commit that restores a table to an earlier version (:func:`rewind`, :mod:`.restore`), and runs may overlap
or touch (their union is what counts). Normally a partition has a single run.

Every commit raises the counter of each topic-partition it records offsets of. delta-rs fails a commit
(``CommitFailedError``) when a transaction with one of its app ids landed after the snapshot it was built
on, but only then: two writers that record offsets of the same partition in different runs (one extends
run 0, the other opens run 1) would otherwise both commit. The shared counter makes the second one fail.

The transactions travel in the same Delta commit as the batch's files, so the files and the record of the
offsets they hold are committed together or not at all.

Example::

    >>> runs = Runs({("t", 0): [(0, 100)]}, {("t", 0): 1})
    >>> for transaction in runs.extend({"t": {0: [(100, 150), (200, 210)]}}):
    ...     print(transaction.app_id, transaction.version)
    streamwarden:t:0:0:end 150
    streamwarden:t:0:1:start 200
    streamwarden:t:0:1:end 210
    streamwarden:t:0:commits 2
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import count
from typing import Protocol

from deltalake import Transaction

from streamwarden.tables.ranges import Interval, IntervalIndex, OffsetRanges, merge_intervals

PREFIX = "streamwarden"
TopicPartition = tuple[str, int]


class TransactionLog(Protocol):
    """What is read from a Delta table here (``deltalake.DeltaTable`` has it)."""

    def transaction_version(self, app_id: str) -> int | None: ...


def app_id(topic: str, partition: int, run: int, bound: str) -> str:
    """The app id of one bound (``start`` or ``end``) of one run."""
    return f"{PREFIX}:{topic}:{partition}:{run}:{bound}"


def commits_id(topic: str, partition: int) -> str:
    """The app id of the counter of commits that recorded offsets of one topic-partition."""
    return f"{PREFIX}:{topic}:{partition}:commits"


@dataclass
class Runs:
    """The committed runs of some topic-partitions, in the order their transactions were opened, and how many
    commits recorded offsets of each."""

    by_partition: dict[TopicPartition, list[Interval]] = field(default_factory=dict)
    commits: dict[TopicPartition, int] = field(default_factory=dict)

    @classmethod
    def read(cls, log: TransactionLog, partitions: Iterable[TopicPartition]) -> Runs:
        """The runs of ``partitions`` as the table's log records them (none for an unknown partition)."""
        found: dict[TopicPartition, list[Interval]] = {}
        commits: dict[TopicPartition, int] = {}
        for topic, partition in partitions:
            runs: list[Interval] = []
            for run in count():
                start = log.transaction_version(app_id(topic, partition, run, "start"))
                end = log.transaction_version(app_id(topic, partition, run, "end"))
                if start is None or end is None:
                    break
                runs.append((start, end))
            found[(topic, partition)] = runs
            commits[(topic, partition)] = log.transaction_version(commits_id(topic, partition)) or 0
        return cls(found, commits)

    def index(self) -> IntervalIndex:
        """The committed offsets as sorted, disjoint intervals per topic-partition."""
        index: IntervalIndex = {}
        for (topic, partition), runs in sorted(self.by_partition.items()):
            merged = merge_intervals(runs)
            if merged:
                index.setdefault(topic, {})[partition] = merged
        return index

    def extend(self, covers: IntervalIndex | dict[str, dict[int, list[Interval]]]) -> list[Transaction]:
        """Record ``covers`` (newly committed intervals): the transactions to commit with the batch.

        Also updates these runs and counters, as the log will read once the commit lands.
        """
        transactions: dict[str, int] = {}
        for topic in sorted(covers):
            for partition in sorted(covers[topic]):
                runs = self.by_partition.setdefault((topic, partition), [])
                for start, end in covers[topic][partition]:
                    run = next((k for k, (_, last) in enumerate(runs) if last == start), None)
                    if run is None:
                        run = len(runs)
                        runs.append((start, end))
                        transactions[app_id(topic, partition, run, "start")] = start
                    else:
                        runs[run] = (runs[run][0], end)
                    transactions[app_id(topic, partition, run, "end")] = end
                if covers[topic][partition]:
                    counted = self.commits[(topic, partition)] = self.commits.get((topic, partition), 0) + 1
                    transactions[commits_id(topic, partition)] = counted
        return [Transaction(app, version) for app, version in transactions.items()]


def rewind(now: Runs, then: Runs) -> list[Transaction]:
    """The transactions that make the log hold ``then``'s runs again (read at the version a table is restored
    to) where it holds ``now``'s (the newest), to travel in the restore commit.

    Each run goes back to its bounds in ``then``; a run opened since becomes empty at its start (readers drop
    empty runs; :meth:`Runs.extend` finds the runs it continues by their ``end``). Each partition's commit
    counter is raised, never lowered, so that a writer that read the table before the restore still collides
    with it. delta-rs keeps the newest transaction of an app id whatever its version.
    """
    transactions: list[Transaction] = []
    for (topic, partition), runs in sorted(now.by_partition.items()):
        before = then.by_partition.get((topic, partition), [])
        moved = [(run, before[run] if run < len(before) else (start, start))
                 for run, (start, end) in enumerate(runs) if run >= len(before) or before[run] != (start, end)]
        for run, (start, end) in moved:
            transactions += [Transaction(app_id(topic, partition, run, "start"), start),
                             Transaction(app_id(topic, partition, run, "end"), end)]
        if moved:
            transactions.append(Transaction(commits_id(topic, partition), now.commits.get((topic, partition), 0) + 1))
    return transactions


def partitions_of(ranges: OffsetRanges) -> list[TopicPartition]:
    """The topic-partitions a batch's planned ranges touch."""
    return [(topic, partition) for topic, parts in sorted(ranges.items()) for partition in sorted(parts)]
