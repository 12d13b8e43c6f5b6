"""Delta file statistics read from Parquet footers, and statistic values as Delta's JSON writes them.

The stream's sink writes them into each add action (``numRecords``, min/max and null counts of the offset
columns); maintenance reads them back to check a file against its log entry, and writes them again when
it reverts a compaction.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq  # type: ignore[import-untyped, unused-ignore]
from pyarrow import fs  # type: ignore[import-untyped, unused-ignore]

STATS_COLUMNS = ("topic", "partition", "offset")


def file_statistics(path: str | Path, columns: tuple[str, ...] = STATS_COLUMNS,
                    filesystem: fs.FileSystem | None = None) -> dict[str, Any]:
    """Delta file statistics (``numRecords``, min/max, null counts) of ``columns``, from the footer only
    (read through ``filesystem`` when given, else the local one)."""
    metadata = pq.read_metadata(str(path), filesystem=filesystem)
    stats: dict[str, Any] = {"numRecords": metadata.num_rows, "minValues": {}, "maxValues": {}, "nullCount": {}}
    if metadata.num_row_groups == 0:
        return stats
    first = metadata.row_group(0)
    leaves = {first.column(i).path_in_schema: i for i in range(first.num_columns)}  # nested leaves are a.b
    for column in columns:
        if column not in leaves:
            continue
        index = leaves[column]
        groups = [metadata.row_group(g).column(index).statistics for g in range(metadata.num_row_groups)]
        if any(g is None or not g.has_min_max for g in groups):
            continue
        stats["minValues"][column] = json_value(min(g.min for g in groups))
        stats["maxValues"][column] = json_value(max(g.max for g in groups))
        stats["nullCount"][column] = sum(g.null_count for g in groups)
    return stats


def json_value(value: Any) -> Any:
    """A statistic as Delta's JSON holds it (timestamps as UTC ISO-8601 with milliseconds, dates as ISO)."""
    if isinstance(value, datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=UTC)
        return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    if isinstance(value, date):
        return value.isoformat()
    return value

