"""The built-in suite of each table, built from the pinned version's schema, and the columns a suite reads.

Per table (its rows): the keys not null; a row unique by topic, partition, offset and the row key
(``session_rows``; one row per offset in the others); ``op`` in its set (``session_rows`` of the built-in
handler); the configured ranges (``STREAMWARDEN_VALIDATION_RANGES``). Per table (its schema): the type of
every column the pipeline defines (the framework's and ``STREAMWARDEN_TABLE_SCHEMA``'s), checked on an empty
frame typed from the pinned version's Arrow schema: a type is a property of the version, not of its rows.
Per topic-partition (:mod:`.frames`): the share of its offsets in quarantine, and how old its newest row is
(class ``STALE``, every other failure is ``EXPECTATION_FAILED``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]

from streamwarden.settings import Settings
from streamwarden.tables.location import QUARANTINE, RECORDS, SESSION_ROWS
from streamwarden.validation.expectations.gx import expectations
from streamwarden.validation.findings import FindingClass
from streamwarden.validation.settings import Bound, ValidationSettings

if TYPE_CHECKING:
    from great_expectations.expectations.expectation import Expectation

INDEX_COLUMNS = ("topic", "partition", "offset")
"""What names a failing row: its Kafka topic, partition and offset."""
PARTITIONS = "partitions"
"""The batch of one row per topic-partition (quarantine share, freshness)."""
OPS = ("snapshot", "upsert", "delete", "end")
BUILT_IN_HANDLER = "table_handler:TableReconstruction"
NEVER = "never"
"""Uniqueness checks every row (GX's default drops rows whose keys are all null first: a copy of the frame)."""
CLASS_KEY = "streamwarden_class"
"""``meta`` key of an expectation whose failure is not EXPECTATION_FAILED (freshness: STALE)."""
SOURCE_KEY = "streamwarden_source"
"""``meta`` key naming where an expectation comes from (the suite, or the user file and its entry)."""

TIMESTAMP = "datetime64[us, UTC]"
GX_TYPES: dict[str, str] = {"string": "string", "long": "int64", "double": "float64", "boolean": "bool",
                            "timestamp": TIMESTAMP}
"""The pandas dtype ExpectColumnTypeToBe expects for each column type of ``STREAMWARDEN_TABLE_SCHEMA`` (the
schema frame of :mod:`.frames` has the dtype of each Arrow type: string, int32, int64, UTC microseconds)."""
FRAMEWORK_TYPES: dict[str, dict[str, str]] = {
    SESSION_ROWS: {"topic": "string", "partition": "int32", "offset": "int64", "session_id": "string",
                   "seq": "int64", "event_ts": TIMESTAMP, "op": "string", "row_id": "string"},
    QUARANTINE: {"topic": "string", "partition": "int32", "offset": "int64", "kafka_timestamp": TIMESTAMP,
                 "error_class": "string", "error_message": "string"},
    RECORDS: {"topic": "string", "partition": "int32", "offset": "int64", "timestamp": TIMESTAMP,
              "timestampType": "int32"},
}
NOT_NULL: dict[str, tuple[str, ...]] = {
    SESSION_ROWS: ("topic", "partition", "offset", "session_id", "seq", "event_ts", "op"),
    QUARANTINE: ("topic", "partition", "offset", "error_class"),
    RECORDS: ("topic", "partition", "offset"),
}
TIME_COLUMNS = {SESSION_ROWS: "event_ts", QUARANTINE: "kafka_timestamp", RECORDS: "timestamp"}
"""The time of a table's rows that freshness reads: session_rows has no Kafka timestamp, its event time
(set by the producer) stands for it."""


@dataclass
class TableSuite:
    """The expectations on one table's rows and on its schema, the columns they read, and notes."""

    table: str
    rows: list[Expectation] = field(default_factory=list)
    schema: list[Expectation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def columns(self, available: Sequence[str]) -> list[str]:
        """The columns of the table the rows expectations read, and the columns naming a row."""
        wanted = set(INDEX_COLUMNS)
        for expectation in self.rows:
            wanted |= columns_of(expectation, available)
        return [c for c in available if c in wanted]


def columns_of(expectation: Expectation, available: Iterable[str]) -> set[str]:
    """The columns ``expectation`` reads (all of them when it has a row condition)."""
    kwargs = expectation.configuration.kwargs
    if kwargs.get("row_condition") is not None:
        return set(available)
    named: set[str] = set()
    for key in ("column", "column_A", "column_B"):
        if isinstance(kwargs.get(key), str):
            named.add(kwargs[key])
    for key in ("column_list", "column_set"):
        if isinstance(kwargs.get(key), list | tuple | set):
            named |= {str(c) for c in kwargs[key]}
    return named


def expected_types(table: str, settings: Settings) -> dict[str, str]:
    """Column -> the type name ExpectColumnTypeToBe checks, for the columns the pipeline defines."""
    types = dict(FRAMEWORK_TYPES[table])
    if table == SESSION_ROWS:
        types.update({name: GX_TYPES[kind] for name, kind in settings.table_schema.items() if kind in GX_TYPES})
    return types


def table_suite(table: str, schema: pa.Schema, settings: Settings, validation: ValidationSettings) -> TableSuite:
    """The built-in suite of ``table`` at the pinned version whose Arrow schema is ``schema``."""
    e = expectations
    suite = TableSuite(table)
    columns = set(schema.names)
    for column in INDEX_COLUMNS:
        if column not in columns:
            suite.schema.append(_meta(e.ExpectColumnToExist(column=column)))
    suite.rows += [_meta(e.ExpectColumnValuesToNotBeNull(column=c)) for c in NOT_NULL[table] if c in columns]
    if table == SESSION_ROWS:
        key = [c for c in validation.row_key_columns if c in columns]
        if key and set(INDEX_COLUMNS) <= columns:
            suite.rows.append(_meta(e.ExpectCompoundColumnsToBeUnique(column_list=[*INDEX_COLUMNS, *key],
                                                                      ignore_row_if=NEVER)))
        else:
            suite.notes.append(f"{table} has no row key column ({validation.row_key}): rows not checked unique "
                               "(check 1 still finds repeated rows)")
        if "op" in columns and settings.session_handler.endswith(BUILT_IN_HANDLER):
            suite.rows.append(_meta(e.ExpectColumnValuesToBeInSet(column="op", value_set=list(OPS))))
    elif set(INDEX_COLUMNS) <= columns:
        suite.rows.append(_meta(e.ExpectCompoundColumnsToBeUnique(column_list=list(INDEX_COLUMNS),
                                                                  ignore_row_if=NEVER)))
    for column, (low, high) in validation.ranges.items():
        name = column.split(".", 1)[-1]
        if ("." in column and not column.startswith(f"{table}.")) or name not in columns:
            continue
        suite.rows.append(_meta(e.ExpectColumnValuesToBeBetween(column=name, min_value=_bound(low),
                                                                max_value=_bound(high))))
    present = {f.name: f.type for f in schema}
    suite.schema += [_meta(e.ExpectColumnTypeToBe(column=c, type_=t))
                     for c, t in expected_types(table, settings).items() if c in present]
    return suite


def unmatched_ranges(validation: ValidationSettings, schemas: dict[str, pa.Schema]) -> list[str]:
    """Notes on ranges no checked table has the column of."""
    notes = []
    for column in validation.ranges:
        table, _, name = column.rpartition(".")
        if not any((not table or table == t) and name in s.names for t, s in schemas.items()):
            notes.append(f"STREAMWARDEN_VALIDATION_RANGES {column}: no checked table has this column")
    return notes


def partition_suite(validation: ValidationSettings, *, quarantine: bool, freshness: bool) -> list[Expectation]:
    """The expectations on the frame of one row per topic-partition (:func:`.frames.partition_frame`)."""
    e = expectations
    suite: list[Expectation] = []
    if quarantine:
        share = validation.quarantine_share
        suite.append(_meta(e.ExpectColumnValuesToBeBetween(
            column="quarantine_share", min_value=0.0, max_value=share,
            description=f"At most {share:.2%} of a topic-partition's offsets in quarantine "
                        "(STREAMWARDEN_VALIDATION_QUARANTINE_SHARE)")))
    if freshness and validation.freshness > 0:
        minutes = validation.freshness / 60
        suite.append(_meta(e.ExpectColumnValuesToBeBetween(
            column="newest_age_minutes", max_value=minutes,
            description=f"The newest row of each topic-partition at most {minutes:g} minutes old "
                        "(STREAMWARDEN_VALIDATION_FRESHNESS)"), FindingClass.STALE))
    return suite


def finding_class(expectation: Expectation) -> FindingClass:
    """STALE for the freshness expectation, EXPECTATION_FAILED for every other."""
    meta: dict[str, Any] = expectation.meta or {}
    return FindingClass(meta.get(CLASS_KEY, FindingClass.EXPECTATION_FAILED.value))


def source(expectation: Expectation) -> str:
    """Where the expectation comes from: the built-in suite, or the user file's entry."""
    meta: dict[str, Any] = expectation.meta or {}
    return str(meta.get(SOURCE_KEY, "suite"))


def _meta(expectation: Expectation, finding: FindingClass = FindingClass.EXPECTATION_FAILED) -> Expectation:
    meta = {SOURCE_KEY: "suite"}
    if finding is not FindingClass.EXPECTATION_FAILED:
        meta[CLASS_KEY] = finding.value
    expectation.meta = {**(expectation.meta or {}), **meta}
    return expectation


def _bound(bound: Bound) -> Any:
    if isinstance(bound, str):  # a time: compared with UTC timestamps, so given a zone (UTC when it has none)
        moment = datetime.fromisoformat(bound)
        return (moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)).isoformat()
    return bound
