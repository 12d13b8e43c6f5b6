"""Spark schemas of the session job: the stateful operator's output, and the two tables it feeds."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from streamwarden.wire import ColumnType

KIND_ROW, KIND_DEAD = "row", "dead"

_SPARK_TYPES: dict[ColumnType, DataType] = {
    "string": StringType(), "long": LongType(), "double": DoubleType(), "boolean": BooleanType(),
    "timestamp": TimestampType(),
}
KAFKA_COLUMNS = [StructField("topic", StringType()), StructField("partition", IntegerType()),
                 StructField("offset", LongType())]
SESSION_COLUMNS = [StructField("session_id", StringType()), StructField("seq", LongType()),
                   StructField("event_ts", TimestampType()), StructField("boundary", StringType()),
                   StructField("restart_request", StringType())]
"""Added to every row of ``session_rows``; ``boundary`` and ``restart_request`` as :mod:`.engine` sets them."""
DEAD_COLUMNS = [StructField("key", BinaryType()), StructField("value", BinaryType()),
                StructField("kafka_timestamp", TimestampType()), StructField("error_class", StringType()),
                StructField("error_message", StringType())]


def handler_fields(columns: Sequence[tuple[str, ColumnType]]) -> list[StructField]:
    """Spark fields of a handler's output columns (checked against the framework's by the handler loader)."""
    return [StructField(name, _SPARK_TYPES[type_]) for name, type_ in columns]


def operator_output_schema(columns: Sequence[tuple[str, ColumnType]]) -> StructType:
    """One schema for both outcomes of a record: ``kind`` row (applied) or dead (quarantined)."""
    return StructType([StructField("kind", StringType()), *KAFKA_COLUMNS, *SESSION_COLUMNS,
                       *handler_fields(columns), *DEAD_COLUMNS])


def session_rows_columns(columns: Sequence[tuple[str, ColumnType]]) -> list[str]:
    return [f.name for f in KAFKA_COLUMNS + SESSION_COLUMNS] + [name for name, _ in columns]


def quarantine_columns() -> list[str]:
    return [f.name for f in KAFKA_COLUMNS + DEAD_COLUMNS]
