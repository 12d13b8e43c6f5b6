"""Builds the streaming query: Kafka source -> records with partition columns -> exactly-once Parquet."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from streamwarden.batch_writer import ParquetBatchWriter
from streamwarden.checkpoint import INITIAL_OFFSETS_FILE
from streamwarden.settings import Settings
from streamwarden.sink.commit_protocol import CommitProtocol
from streamwarden.source.kafka_source import SOURCE_NAME, KafkaDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

RECORDS_TABLE = "records"
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
        })
    return options


def kafka_frame(spark: SparkSession, settings: Settings) -> DataFrame:
    """The raw Kafka records as a streaming DataFrame."""
    if settings.source_impl == "python":
        spark.dataSource.register(KafkaDataSource)
    source = "kafka" if settings.source_impl == "jvm" else SOURCE_NAME
    return spark.readStream.format(source).options(**source_options(settings)).load()


def with_partition_columns(frame: DataFrame) -> DataFrame:
    """Add folder partition columns derived from the topic and the record timestamp (UTC)."""
    return frame.select(
        "*",
        F.col("topic").alias(PARTITION_COLUMN_NAMES["topic"]),
        F.date_format("timestamp", "yyyy-MM-dd").alias(PARTITION_COLUMN_NAMES["date"]),
        F.date_format("timestamp", "HH").alias(PARTITION_COLUMN_NAMES["hour"]),
    )


def start_query(spark: SparkSession, settings: Settings) -> StreamingQuery:
    """Start the stream; the commit protocol recovers any interrupted commit first."""
    protocol = CommitProtocol(settings.root("output"), RECORDS_TABLE, settings.output_compression)
    protocol.recover()
    writer = ParquetBatchWriter(
        protocol,
        settings.checkpoint_location,
        [PARTITION_COLUMN_NAMES[c] for c in settings.output_partition_by],
        settings.output_compression,
    )
    return (
        with_partition_columns(kafka_frame(spark, settings))
        .writeStream.queryName(settings.query_name)
        .foreachBatch(writer)
        .option("checkpointLocation", str(settings.checkpoint_location))
        .trigger(processingTime=f"{settings.trigger_interval} seconds")
        .start()
    )
