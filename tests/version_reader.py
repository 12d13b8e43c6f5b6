"""A reader beside the live stream: opens every new version of a Delta table and checks it is whole.

Per topic-partition the rows of a version must be exactly the offsets its log records as committed (no
part of a batch, no duplicate, no hole), and a committed offset never goes missing in a later version.
For tables with one row per offset (``records``).
"""

from __future__ import annotations

import threading

import pyarrow as pa

from streamwarden.failures import ConfigError
from streamwarden.tables.committed import Runs
from streamwarden.tables.location import TableLocation
from streamwarden.tables.reading import dataset

Seen = dict[tuple[str, int], list[tuple[int, int]]]


def offsets_at(location: TableLocation, version: int) -> tuple[pa.Table, Seen]:
    """The (topic, partition, offset) rows of ``version`` and the committed runs its log records."""
    table = location.open(version)
    rows = dataset(table, location).to_table(columns=["topic", "partition", "offset"])
    keys = rows.group_by(["topic", "partition"]).aggregate([])
    partitions = set(zip(keys.column("topic").to_pylist(), keys.column("partition").to_pylist(), strict=True))
    return rows, {(t, p): runs for t, parts in Runs.read(table, sorted(partitions)).index().items()
                  for p, runs in parts.items()}


def check_version(rows: pa.Table, committed: Seen) -> list[str]:
    """Rows of one version against the runs its log records: the same offsets, each once."""
    problems = []
    stats = rows.group_by(["topic", "partition"]).aggregate(
        [("offset", "count"), ("offset", "count_distinct"), ("offset", "min"), ("offset", "max")])
    for topic, partition, count, distinct, low, high in zip(
            *(stats.column(c).to_pylist() for c in ("topic", "partition", "offset_count", "offset_count_distinct",
                                                     "offset_min", "offset_max")), strict=True):
        key = (topic, partition)
        if count != distinct:
            problems.append(f"{key}: {count - distinct} duplicate(s)")
        runs = [(low, high + 1)] if distinct == high - low + 1 else None
        if runs != committed.get(key):
            problems.append(f"{key}: rows cover {runs or 'offsets with holes'}, the log records {committed.get(key)}")
    return problems


class VersionReader:
    """Checks every version of ``location`` in a thread, from the first to the newest, until stopped."""

    def __init__(self, location: TableLocation, pause: float = 0.2) -> None:
        self.location = location
        self.pause = pause
        self.checked: list[int] = []
        self.problems: list[str] = []
        self.high: dict[tuple[str, int], int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> VersionReader:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(600)
        assert not self._thread.is_alive(), "the reader did not finish"

    def _loop(self) -> None:
        while True:
            stopping = self._stop.is_set()  # one last pass after the stop: every version is read
            try:
                latest = self.location.open().version() if self.location.exists() else -1
            except ConfigError:  # the table's folder can appear a moment before its first commit
                latest = -1
            for version in range(self.checked[-1] + 1 if self.checked else 0, latest + 1):
                self._check(version)
            if stopping:
                return
            self._stop.wait(self.pause)

    def _check(self, version: int) -> None:
        rows, committed = offsets_at(self.location, version)
        self.problems.extend(f"version {version}: {p}" for p in check_version(rows, committed))
        for key, runs in committed.items():
            if runs[-1][1] < self.high.get(key, 0):
                self.problems.append(f"version {version}: {key} went back from {self.high[key]} to {runs[-1][1]}")
            self.high[key] = runs[-1][1]
        self.checked.append(version)
