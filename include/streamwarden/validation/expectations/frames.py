"""The pandas frames the expectations read besides a table's rows: its schema, and one row per topic-partition.

(The rows are read batch by batch, :mod:`.increment`.) The schema frame has no rows: its dtypes follow the
Arrow schema one to one, so a column type is checked as the version declares it whatever its values. The
partition frame holds per topic-partition the offsets of each table (from check 1), the share in quarantine
and the age of the newest row (``newest_age_minutes``, at the reference time: now, or the pinned version's
commit).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.compute as pc  # type: ignore[import-untyped, unused-ignore]
import pyarrow.dataset as ds  # type: ignore[import-untyped, unused-ignore]

from streamwarden.tables.committed import TopicPartition
from streamwarden.tables.location import QUARANTINE
from streamwarden.validation.coverage import PartitionCoverage
from streamwarden.validation.snapshot import PinnedTable


def is_string(kind: pa.DataType) -> bool:
    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind))


def schema_frame(schema: pa.Schema) -> pd.DataFrame:
    """An empty frame whose dtypes follow ``schema`` (int32 stays int32, a UTC timestamp a UTC datetime)."""
    return pd.DataFrame({f.name: pd.Series([], dtype=_dtype(f.type)) for f in schema})


def _dtype(kind: pa.DataType) -> Any:
    if is_string(kind):
        return pd.StringDtype()
    if pa.types.is_timestamp(kind):
        return pd.DatetimeTZDtype(kind.unit, kind.tz) if kind.tz else np.dtype(f"datetime64[{kind.unit}]")
    if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind):
        return np.dtype(kind.to_pandas_dtype())
    return np.dtype(object)


@dataclass(frozen=True)
class Newest:
    """The newest time of one table's rows in one topic-partition."""

    at: datetime
    column: str  # the table's time column


def newest_in_frame(frame: pd.DataFrame, column: str) -> dict[TopicPartition, Newest]:
    """The newest non-null ``column`` per topic-partition of ``frame``."""
    newest = frame.groupby(["topic", "partition"], observed=True, sort=False)[column].max().dropna()
    return {(str(key[0]), int(key[1])): _newest(at.to_pydatetime(), column)  # type: ignore[index]
            for key, at in newest.items()}


def newest_in_table(table: PinnedTable, column: str, only: Collection[TopicPartition] | None = None
                    ) -> dict[TopicPartition, Newest]:
    """The newest non-null ``column`` per topic-partition of the pinned files (of ``only`` those when given),
    three columns read a record batch at a time: memory does not grow with the table."""
    newest: dict[TopicPartition, Newest] = {}
    if only is not None and not only:
        return newest
    rows = table.dataset()
    wanted = None if only is None else ds.field("partition").isin(sorted({p for _, p in only}))
    with table.location.reaching():
        for batch in rows.to_batches(columns=["topic", "partition", column], filter=wanted):
            data = pa.Table.from_batches([batch])
            data = data.filter(pc.is_valid(data[column]))
            for row in data.group_by(["topic", "partition"]).aggregate([(column, "max")]).to_pylist():
                tp = (str(row["topic"]), int(row["partition"]))
                if only is not None and tp not in only:
                    continue
                seen = _newest(row[f"{column}_max"], column)
                if tp not in newest or seen.at > newest[tp].at:
                    newest[tp] = seen
    return newest


def _newest(at: datetime, column: str) -> Newest:
    return Newest(at if at.tzinfo is not None else at.replace(tzinfo=UTC), column)


def partition_frame(partitions: Sequence[PartitionCoverage], tables: Sequence[str],
                    newest: Mapping[TopicPartition, Newest], reference: datetime) -> pd.DataFrame:
    """One row per topic-partition: its offsets per table, ``quarantine_share`` (when ``quarantine`` is among
    ``tables``), the newest row's time and ``newest_age_minutes`` at ``reference``."""
    records = []
    for p in partitions:
        offsets = {name: p.offsets.get(name, 0) for name in tables}
        total = sum(offsets.values())
        seen = newest.get((p.topic, p.partition))
        last = max((end for _, end in p.claimed), default=None)
        records.append({
            "topic": p.topic, "partition": p.partition, **{f"{name}_offsets": n for name, n in offsets.items()},
            "quarantine_share": offsets.get(QUARANTINE, 0) / total if QUARANTINE in tables and total else None,
            "newest_at": None if seen is None else pd.Timestamp(seen.at),
            "newest_column": None if seen is None else seen.column,
            "newest_age_minutes": None if seen is None else (reference - seen.at).total_seconds() / 60,
            "last_offset": None if last is None else last - 1,
        })
    frame = pd.DataFrame.from_records(records, columns=[
        "topic", "partition", *(f"{name}_offsets" for name in tables), "quarantine_share", "newest_at",
        "newest_column", "newest_age_minutes", "last_offset"])
    for column in ("quarantine_share", "newest_age_minutes"):
        frame[column] = frame[column].astype(float)
    return frame
