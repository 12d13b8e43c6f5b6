"""Spark schemas of the session job: the two tables its stateful operator feeds."""

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


def session_rows_schema(columns: Sequence[tuple[str, ColumnType]]) -> StructType:
    """The rows of applied events (``session_rows``): Kafka and session columns, then the handler's."""
    return StructType([*KAFKA_COLUMNS, *SESSION_COLUMNS, *handler_fields(columns)])


def quarantine_schema() -> StructType:
    """The dead letters (``quarantine``): where each record was, its bytes, and why it was not applied."""
    return StructType([*KAFKA_COLUMNS, *DEAD_COLUMNS])
