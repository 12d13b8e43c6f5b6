"""Where an output table lives, how it is opened, and the checks that it is ours.

A table is the folder ``<output_root>/<name>``, a Delta table once the stream has started on it. An output
root in the layout of releases before Delta (``<table>/_manifests``) is refused: its files carry no Delta
log, and reading it as Delta would see nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from streamwarden.failures import ConfigError
from streamwarden.settings import Settings

SESSION_ROWS = "session_rows"
QUARANTINE = "quarantine"
RECORDS = "records"
TABLES = (SESSION_ROWS, QUARANTINE, RECORDS)
LEGACY_MANIFESTS = "_manifests"


@dataclass(frozen=True)
class TableLocation:
    """One output table: its folder and the storage options delta-rs needs to reach it."""

    name: str
    path: Path
    storage_options: dict[str, str]

    @classmethod
    def of(cls, settings: Settings, name: str) -> TableLocation:
        """The table ``name`` under the configured output root."""
        if name not in TABLES:
            raise ConfigError(f"unknown table {name!r}; the tables are {', '.join(TABLES)}")
        return cls(name, settings.root("output") / name, dict(settings.storage_options))

    @property
    def uri(self) -> str:
        return str(self.path)

    def exists(self) -> bool:
        """True when the folder holds a Delta log."""
        return (self.path / "_delta_log").is_dir()

    def refuse_legacy_layout(self) -> None:
        """CONFIG error when the folder holds the manifest layout of an earlier release."""
        if (self.path / LEGACY_MANIFESTS).is_dir():
            raise ConfigError(
                f"{self.path} holds Parquet files with {LEGACY_MANIFESTS}/ from a release before Delta Lake "
                "tables; it cannot be continued as a Delta table. Point STREAMWARDEN_OUTPUT_ROOT at a new folder "
                "(and start on a new checkpoint: a new STREAMWARDEN_QUERY_NAME), or move the old folder away; "
                "its Parquet files stay readable with any Parquet reader.",
                details={"table": self.name, "path": str(self.path)})

    def open(self, version: int | None = None) -> DeltaTable:
        """The Delta table at ``version`` (the newest when None); CONFIG error when there is none."""
        try:
            return DeltaTable(self.uri, version=version, storage_options=self.storage_options or None)
        except TableNotFoundError as exc:
            raise ConfigError(f"no Delta table {self.name!r} at {self.uri}: {exc}") from None

    def open_or_none(self) -> DeltaTable | None:
        """The newest version of the table, or None before the stream's first batch created it."""
        return self.open() if self.exists() else None

    def create(self, schema: pa.Schema, partition_by: list[str]) -> DeltaTable:
        """Create the table with ``schema`` and ``partition_by``, or check that an existing one has them.

        Both are pinned by the first start: another schema or partitioning on the same table is a CONFIG
        error (delta-rs would accept mismatched files silently).
        """
        self.refuse_legacy_layout()
        if not self.exists():
            return DeltaTable.create(self.uri, schema, mode="ignore", partition_by=partition_by or None,
                                     storage_options=self.storage_options or None,
                                     configuration={"delta.checkpointInterval": "100"})
        table = self.open()
        recorded = pa.schema(table.schema().to_arrow())
        recorded_partitions = list(table.metadata().partition_columns)
        if not recorded.equals(schema) or recorded_partitions != partition_by:
            raise ConfigError(
                f"table {self.name!r} at {self.uri} was created with partitions {recorded_partitions} and schema "
                f"[{_describe(recorded)}]; the job now writes partitions {partition_by} and schema "
                f"[{_describe(schema)}]. Keep the settings that created it (STREAMWARDEN_TABLE_SCHEMA, "
                "STREAMWARDEN_OUTPUT_PARTITION_BY, the session handler), or write to a new output root.",
                details={"table": self.name})
        return table


def _describe(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name} {f.type}" for f in schema)

