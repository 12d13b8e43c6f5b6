"""Where an output table lives, how it is opened, and the checks that it is ours.

A table is the folder ``<output_root>/<name>``, a Delta table once the stream has started on it, on the
local filesystem or on an object store (:mod:`streamwarden.storage`). delta-rs reaches it by :attr:`uri`
and the storage options, pyarrow (the driver, and the executors writing a batch's files) through
:meth:`filesystem`. An output
root in the layout of releases before Delta (``<table>/_manifests``) is refused: its files carry no Delta
log, and reading it as Delta would see nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError
from pyarrow import fs  # type: ignore[import-untyped, unused-ignore]

from streamwarden.failures import ConfigError, EnvironmentFailure
from streamwarden.settings import Settings
from streamwarden.storage import StoreUri
from streamwarden.tables.filesystem import filesystem

SESSION_ROWS = "session_rows"
QUARANTINE = "quarantine"
RECORDS = "records"
TABLES = (SESSION_ROWS, QUARANTINE, RECORDS)


def pipeline_tables(settings: Settings) -> tuple[str, ...]:
    """The tables the configured pipeline writes."""
    return (RECORDS,) if settings.pipeline == "records" else (SESSION_ROWS, QUARANTINE)


def requested_tables(given: Sequence[str] | None, settings: Settings, problems: list[str]) -> tuple[str, ...]:
    """The tables a run's ``tables`` Param names (none: every table of the pipeline); unknown ones are added to
    ``problems``, naming the Param."""
    known = pipeline_tables(settings)
    tables = tuple(given or known)
    unknown = [t for t in tables if t not in known]
    if unknown:
        problems.append(f"Param tables: {', '.join(map(str, unknown))} not among this pipeline's tables "
                        f"({', '.join(known)})")
    return tables
LEGACY_MANIFESTS = "_manifests"
_TERMINAL_CODES = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True)
class TableLocation:
    """One output table: its folder (local, or on an object store) and the storage options that reach it."""

    name: str
    path: Path | StoreUri
    storage_options: dict[str, str]

    @classmethod
    def of(cls, settings: Settings, name: str) -> TableLocation:
        """The table ``name`` under the configured output root."""
        if name not in TABLES:
            raise ConfigError(f"unknown table {name!r}; the tables are {', '.join(TABLES)}")
        return cls(name, settings.output_location / name, dict(settings.storage_options))

    @property
    def uri(self) -> str:
        """The table as delta-rs opens it: a local path, or an object-store URI (``s3://`` for ``s3a://``)."""
        return self.path.delta_uri if isinstance(self.path, StoreUri) else str(self.path)

    def filesystem(self) -> tuple[fs.FileSystem, str]:
        """A pyarrow filesystem that reaches the table's files, and the table folder's path on it."""
        return filesystem(self.path, self.storage_options)

    @contextmanager
    def reaching(self) -> Iterator[None]:
        """Turns an ``OSError`` of the store (unreachable, refused, denied, disk full) into an ENVIRONMENT
        failure that names the table; pyarrow and delta-rs both raise ``OSError`` for them."""
        try:
            yield
        except OSError as exc:
            cause = " ".join(_TERMINAL_CODES.sub("", str(exc)).split())[:600]
            raise EnvironmentFailure(f"table {self.name!r} at {self.uri} cannot be reached: {cause}",
                                     details={"table": self.name}) from exc

    def _holds_folder(self, name: str) -> bool:
        store, base = self.filesystem()
        with self.reaching():
            return bool(store.get_file_info(f"{base}/{name}").type == fs.FileType.Directory)

    def exists(self) -> bool:
        """True when the folder holds a Delta log."""
        return self._holds_folder("_delta_log")

    def refuse_legacy_layout(self) -> None:
        """CONFIG error when the folder holds the manifest layout of an earlier release."""
        if self._holds_folder(LEGACY_MANIFESTS):
            raise ConfigError(
                f"{self.path} holds Parquet files with {LEGACY_MANIFESTS}/ from a release before Delta Lake "
                "tables; it cannot be continued as a Delta table. Point STREAMWARDEN_OUTPUT_ROOT at a new folder "
                "(and start on a new checkpoint: a new STREAMWARDEN_QUERY_NAME), or move the old folder away; "
                "its Parquet files stay readable with any Parquet reader.",
                details={"table": self.name, "path": str(self.path)})

    def open(self, version: int | None = None) -> DeltaTable:
        """The Delta table at ``version`` (the newest when None); CONFIG error when there is none."""
        try:
            with self.reaching():
                return DeltaTable(self.uri, version=version, storage_options=self.storage_options or None)
        except TableNotFoundError as exc:
            raise ConfigError(f"no Delta table {self.name!r} at {self.uri}: {exc}") from None

    def open_or_none(self) -> DeltaTable | None:
        """The newest version of the table, or None before the stream's first batch created it."""
        return self.open() if self.exists() else None

    def create(self, schema: pa.Schema, partition_by: list[str]) -> DeltaTable:
        """Create the table with ``schema`` and ``partition_by``, or check that an existing one has them.

        Both are pinned by the first start: another schema or partitioning on the same table is a CONFIG
        error (delta-rs would accept mismatched files silently). Schemas are compared by column name (type and
        nullability each): the order may differ, since a column added by schema evolution
        (``DeltaTable.alter.add_columns``, the ``upgrade_stream`` DAG) comes after the partition columns in the
        table while the job's frame has it before them.
        """
        self.refuse_legacy_layout()
        if not self.exists():
            with self.reaching():
                return DeltaTable.create(self.uri, schema, mode="ignore", partition_by=partition_by or None,
                                         storage_options=self.storage_options or None,
                                         configuration={"delta.checkpointInterval": "100"})
        table = self.open()
        recorded = pa.schema(table.schema().to_arrow())
        recorded_partitions = list(table.metadata().partition_columns)
        if by_name(recorded) != by_name(schema) or recorded_partitions != partition_by:
            raise ConfigError(
                f"table {self.name!r} at {self.uri} was created with partitions {recorded_partitions} and schema "
                f"[{_describe(recorded)}]; the job now writes partitions {partition_by} and schema "
                f"[{_describe(schema)}]. Keep the settings that created it (STREAMWARDEN_TABLE_SCHEMA, "
                "STREAMWARDEN_OUTPUT_PARTITION_BY, the session handler), or write to a new output root.",
                details={"table": self.name})
        return table


def by_name(schema: pa.Schema) -> dict[str, tuple[pa.DataType, bool]]:
    """Each column's type and nullability, by name (the order of the columns does not count)."""
    return {field.name: (field.type, field.nullable) for field in schema}


def _describe(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name} {f.type}" for f in schema)

