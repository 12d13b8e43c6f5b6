"""Delta file statistics read from Parquet footers, and statistic values as Delta's JSON writes them.

The stream's sink writes them into each add action (``numRecords``, min/max and null counts of every column
the footer bounds: readers that prune files by statistics, delta-rs's pyarrow dataset among them, need
bounds for each column they filter on); maintenance reads them back to check a file against its log
entry, and writes them again when it reverts a compaction.
"""

from __future__ import annotations

import math
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq  # type: ignore[import-untyped, unused-ignore]
from pyarrow import fs  # type: ignore[import-untyped, unused-ignore]

STATS_COLUMNS = ("topic", "partition", "offset")
_BYTES = ("BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY")


def file_statistics(path: str | Path, columns: tuple[str, ...] | None = STATS_COLUMNS,
                    filesystem: fs.FileSystem | None = None) -> dict[str, Any]:
    """Delta file statistics (``numRecords``, min/max, null counts) of ``columns`` (None: every column), from
    the footer only (read through ``filesystem`` when given, else the local one).

    A column gets its null count when every row group has one, and min/max too when every row group holding
    a value has bounds; binary columns (whose bounds Delta does not keep) and NaN bounds get the null count
    alone.
    """
    metadata = pq.read_metadata(str(path), filesystem=filesystem)
    stats: dict[str, Any] = {"numRecords": metadata.num_rows, "minValues": {}, "maxValues": {}, "nullCount": {}}
    if metadata.num_row_groups == 0:
        return stats
    first = metadata.row_group(0)
    leaves = {first.column(i).path_in_schema: i for i in range(first.num_columns)}  # nested leaves are a.b
    for column in leaves if columns is None else columns:
        if column not in leaves:
            continue
        index = leaves[column]
        groups = [metadata.row_group(g).column(index).statistics for g in range(metadata.num_row_groups)]
        if any(g is None or not g.has_null_count for g in groups):
            continue
        stats["nullCount"][column] = sum(g.null_count for g in groups)
        valued = [g for g in groups if g.num_values > 0]  # a row group of nulls has no bounds
        described = metadata.schema.column(index)
        binary = described.physical_type in _BYTES and str(described.logical_type) != "String"
        if binary or not valued or not all(g.has_min_max for g in valued):
            continue
        low, high = min(g.min for g in valued), max(g.max for g in valued)
        if not any(isinstance(v, float) and math.isnan(v) for v in (low, high)):
            stats["minValues"][column] = json_value(low)
            stats["maxValues"][column] = json_value(high, upper=True)
    return stats


def json_value(value: Any, upper: bool = False) -> Any:
    """A statistic as Delta's JSON holds it (timestamps as UTC ISO-8601 with milliseconds, dates as ISO);
    an ``upper`` bound's timestamp is rounded up to the millisecond, so that it still bounds the values."""
    if isinstance(value, datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=UTC)
        if upper and moment.microsecond % 1000:
            moment += timedelta(microseconds=1000 - moment.microsecond % 1000)
        return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    if isinstance(value, date):
        return value.isoformat()
    return value

