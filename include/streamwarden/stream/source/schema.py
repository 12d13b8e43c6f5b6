"""The output schema of the Kafka source, identical for the Python source and Spark's JVM connector."""

from __future__ import annotations

import pyarrow as pa

SPARK_DDL = (
    "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, "
    "timestampType INT, headers ARRAY<STRUCT<key: STRING, value: BINARY>>"
)
"""Column order and types of ``spark.readStream.format("kafka")`` with ``includeHeaders=true``."""

HEADER_TYPE = pa.list_(pa.field("element", pa.struct([("key", pa.string()), ("value", pa.binary())])))
ARROW_SCHEMA = pa.schema([
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("timestamp", pa.timestamp("us", tz="UTC")),
    ("timestampType", pa.int32()),
    ("headers", HEADER_TYPE),
])
"""Arrow twin of :data:`SPARK_DDL`; record batches must match it exactly to skip row conversion."""
