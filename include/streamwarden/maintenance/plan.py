"""Which partitions of a table are worth compacting: their small files, counted from the Delta log.

A file is *small* below ``small_file_ratio`` x the target size; a partition *pays* when it has at least
``min_files`` small files. Only the log is read (file sizes from its add actions), never the files.

Example::

    plan = plan_table(location.open(), "session_rows", small_bytes=96 * 2**20, min_files=5)
    for partition in plan.partitions:
        print(partition.label, partition.small_files, partition.pays)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
from deltalake import DeltaTable

from streamwarden.failures import ConfigError

PartitionValues = tuple[tuple[str, str | None], ...]
"""A partition as ``((column, value), ...)`` in the table's partition column order."""


@dataclass(frozen=True)
class PartitionPlan:
    """One partition of one table: its files, its small files, and whether compacting them pays."""

    values: PartitionValues
    files: int
    bytes: int
    small_files: int
    small_bytes: int
    pays: bool
    reason: str

    @property
    def label(self) -> str:
        """``topic=orders/date=2026-11-23`` (``(unpartitioned)`` for a table without partitions)."""
        return "/".join(f"{name}={value}" for name, value in self.values) or "(unpartitioned)"

    def filters(self) -> list[tuple[str, str, str]]:
        """The partition as delta-rs ``partition_filters``."""
        return [(name, "=", value) for name, value in self.values if value is not None]

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "values": [list(v) for v in self.values], "label": self.label}

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> PartitionPlan:
        fields = {k: v for k, v in document.items() if k != "label"}
        return cls(**{**fields, "values": tuple((name, value) for name, value in document["values"])})


@dataclass(frozen=True)
class TablePlan:
    """What maintenance plans for one table at one version."""

    table: str
    version: int
    partitions: tuple[PartitionPlan, ...]

    @property
    def to_compact(self) -> tuple[PartitionPlan, ...]:
        return tuple(p for p in self.partitions if p.pays)

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table, "version": self.version, "partitions": [p.to_json() for p in self.partitions]}

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> TablePlan:
        return cls(document["table"], document["version"],
                   tuple(PartitionPlan.from_json(p) for p in document["partitions"]))


def parse_partition_filter(text: str) -> dict[str, str]:
    """``"topic=orders,date=2026-11-23"`` as ``{"topic": "orders", "date": "2026-11-23"}`` ("" is no filter)."""
    result: dict[str, str] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, equals, value = item.partition("=")
        if not equals or not name.strip() or not value.strip():
            raise ConfigError(f"partition filter {text!r}: {item!r} is not column=value")
        if name.strip() in result:
            raise ConfigError(f"partition filter {text!r}: column {name.strip()!r} is given twice")
        result[name.strip()] = value.strip()
    return result


def plan_table(table: DeltaTable, name: str, *, small_bytes: int, min_files: int,
               partition_filter: Mapping[str, str] | None = None) -> TablePlan:
    """The compaction plan of ``table`` at its loaded version, partition by partition (sorted)."""
    columns = list(table.metadata().partition_columns)
    unknown = sorted(set(partition_filter or {}) - set(columns))
    if unknown:
        raise ConfigError(f"table {name}: partition filter names {', '.join(unknown)}, but the table is partitioned "
                          f"by {', '.join(columns) or 'nothing'}")
    actions = pa.table(table.get_add_actions(flatten=False)).select(["size_bytes", "partition"]).to_pylist()
    groups: dict[PartitionValues, list[int]] = {}
    for action in actions:
        values = tuple((column, (action["partition"] or {}).get(column)) for column in columns)
        if all(dict(values).get(k) == v for k, v in (partition_filter or {}).items()):
            groups.setdefault(values, []).append(int(action["size_bytes"]))
    partitions = tuple(_plan_partition(values, sizes, small_bytes, min_files)
                       for values, sizes in sorted(groups.items(), key=lambda item: str(item[0])))
    return TablePlan(name, table.version(), partitions)


def _plan_partition(values: PartitionValues, sizes: list[int], small_bytes: int, min_files: int) -> PartitionPlan:
    small = [size for size in sizes if size < small_bytes]
    if any(value is None for _, value in values):
        pays, reason = False, "a partition value is null: not compacted"
    elif len(small) >= min_files:
        pays, reason = True, f"{len(small)} small files >= {min_files}"
    else:
        pays, reason = False, f"{len(small)} small files < {min_files}"
    return PartitionPlan(values, len(sizes), sum(sizes), len(small), sum(small), pays, reason)
