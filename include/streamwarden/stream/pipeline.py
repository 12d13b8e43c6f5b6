"""Builds the streaming query: Kafka source -> (sessions | raw records) -> exactly-once Delta Lake tables."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from streamwarden.runfiles.checkpoint import INITIAL_OFFSETS_FILE
from streamwarden.settings import Settings
from streamwarden.stream.batch_writer import DeltaBatchWriter, TableSink
from streamwarden.stream.sessions.engine import SessionPolicy
from streamwarden.stream.sessions.handler import load_checked_handler, pin_handler
from streamwarden.stream.sessions.packing import (
    PACKED_INPUT_SCHEMA,
    PACKED_OUTPUT_SCHEMA,
    SESSION_BUCKET,
    SESSION_KEY,
    Unpacker,
    pack_by_bucket,
    rows_by_kind,
)
from streamwarden.stream.sessions.processor import INPUT_COLUMNS, SessionJobConfig, SessionProcessor
from streamwarden.stream.sessions.tables import KIND_DEAD, KIND_ROW, quarantine_schema, session_rows_schema
from streamwarden.stream.sink.delta_sink import DeltaSink
from streamwarden.stream.source.kafka_source import SOURCE_NAME, KafkaDataSource
from streamwarden.tables.location import QUARANTINE, RECORDS, SESSION_ROWS, TableLocation
from streamwarden.wire import ColumnType, TableSchema

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

PARTITION_COLUMN_NAMES = {"topic": "source_topic", "date": "event_date", "hour": "event_hour"}
"""Folder partition columns; distinct from the in-file columns, so every file keeps topic/partition/offset."""


def source_options(settings: Settings) -> dict[str, str]:
    """Options for the Kafka source (same names for the Python source and Spark's JVM connector)."""
    options = {f"kafka.{k}": v for k, v in settings.kafka_client_config().items()}
    options.update({
        "subscribePattern": settings.topic_pattern,
        "startingOffsets": settings.starting_offsets,
        "failOnDataLoss": str(settings.fail_on_data_loss).lower(),
    })
    if settings.max_offsets_per_trigger:
        options["maxOffsetsPerTrigger"] = str(settings.max_offsets_per_trigger)
    if settings.source_impl == "jvm":
        options["includeHeaders"] = "true"
    else:
        options.update({
            "highWatermarkSource": settings.high_watermark_source,
            "failOnTopicDeletion": str(settings.integrity_tier == "strict").lower(),
            "stopMarkerPath": str(settings.stop_marker_path),
            "initialOffsetsPath": str(settings.checkpoint_location / INITIAL_OFFSETS_FILE),
            "readTimeout": str(settings.read_timeout),
            "maxReadTasks": str(settings.max_read_tasks),
        })
    return options


def kafka_frame(spark: SparkSession, settings: Settings) -> DataFrame:
    """The raw Kafka records as a streaming DataFrame."""
    if settings.source_impl == "python":
        spark.dataSource.register(KafkaDataSource)
    source = "kafka" if settings.source_impl == "jvm" else SOURCE_NAME
    return spark.readStream.format(source).options(**source_options(settings)).load()


def with_partition_columns(frame: DataFrame, time_column: str) -> DataFrame:
    """Add folder partition columns derived from the topic and a timestamp column (UTC)."""
    return frame.select(
        "*",
        F.col("topic").alias(PARTITION_COLUMN_NAMES["topic"]),
        F.date_format(time_column, "yyyy-MM-dd").alias(PARTITION_COLUMN_NAMES["date"]),
        F.date_format(time_column, "HH").alias(PARTITION_COLUMN_NAMES["hour"]),
    )


def handler_columns(settings: Settings) -> Sequence[tuple[str, ColumnType]]:
    """The configured handler's output columns, once its fingerprint is pinned to the checkpoint."""
    handler, columns = load_checked_handler(settings.session_handler, TableSchema.parse(settings.table_schema))
    pin_handler(settings.checkpoint_location, handler, settings.session_buckets)
    return columns


def session_frame(raw: DataFrame, settings: Settings, columns: Sequence[tuple[str, ColumnType]]) -> DataFrame:
    """Group records by session id (the Kafka key) into buckets and run the session handler over each session.

    Records cross the shuffle and the operator packed per bucket, and its output leaves packed per kind
    (:mod:`streamwarden.stream.sessions.packing`)."""
    config = SessionJobConfig(
        handler_path=settings.session_handler,
        table_schema=dict(settings.table_schema),
        policy=SessionPolicy(settings.integrity_tier, settings.on_gap, settings.malformed_policy, settings.lateness,
                             settings.max_message_bytes),
        session_timeout_ms=int(settings.session_timeout * 1000),
    )
    session = F.coalesce(F.col("key").cast("string"), F.lit(""))
    keyed = raw.select(*INPUT_COLUMNS, session.alias(SESSION_KEY),
                       F.pmod(F.xxhash64(session), F.lit(settings.session_buckets)).alias(SESSION_BUCKET))
    packed = keyed.mapInArrow(pack_by_bucket, PACKED_INPUT_SCHEMA)
    return packed.groupBy(SESSION_BUCKET).transformWithStateInPandas(
        statefulProcessor=SessionProcessor(config),
        outputStructType=PACKED_OUTPUT_SCHEMA,
        outputMode="Append",
        timeMode="ProcessingTime",
    )


def _unpacked(kind: str, schema: StructType, time_column: str) -> Callable[[DataFrame], DataFrame]:
    """The rows of one kind of the operator's packed output, as a table's rows with its folder columns."""
    unpack = Unpacker(kind, to_arrow_schema(schema, timezone="UTC"))

    def select(frame: DataFrame) -> DataFrame:
        return with_partition_columns(frame.filter(F.col("kind") == kind).mapInArrow(unpack, schema), time_column)

    return select


def _sinks(settings: Settings, frame: DataFrame, columns: Sequence[tuple[str, ColumnType]]) -> list[TableSink]:
    """The output tables, each created (or checked against its pinned schema) before the first batch."""
    folders = [PARTITION_COLUMN_NAMES[c] for c in settings.output_partition_by]

    def sink(table: str, select: Callable[[DataFrame], DataFrame], kind: str | None = None) -> TableSink:
        schema = to_arrow_schema(select(frame).schema, timezone="UTC")
        return TableSink(DeltaSink(TableLocation.of(settings, table), schema, folders), select, kind)

    if settings.pipeline == "records":
        return [sink(RECORDS, lambda rows: with_partition_columns(rows, "timestamp"))]
    return [
        sink(SESSION_ROWS, _unpacked(KIND_ROW, session_rows_schema(columns), "event_ts"), KIND_ROW),
        sink(QUARANTINE, _unpacked(KIND_DEAD, quarantine_schema(), "kafka_timestamp"), KIND_DEAD),
    ]


def start_query(spark: SparkSession, settings: Settings) -> StreamingQuery:
    """Start the stream; the commit protocols recover any interrupted commit first."""
    raw = kafka_frame(spark, settings)
    columns = handler_columns(settings) if settings.pipeline == "sessions" else []
    frame = raw if settings.pipeline == "records" else session_frame(raw, settings, columns)
    writer = DeltaBatchWriter(_sinks(settings, frame, columns), settings.checkpoint_location,
                              settings.output_compression, None if settings.pipeline == "records" else rows_by_kind)
    return (
        frame.writeStream.queryName(settings.query_name)
        .foreachBatch(writer)
        .option("checkpointLocation", str(settings.checkpoint_location))
        .trigger(processingTime=f"{settings.trigger_interval} seconds")
        .start()
    )
