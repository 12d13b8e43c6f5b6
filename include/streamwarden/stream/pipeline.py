"""Builds the streaming query: Kafka source -> (sessions | raw records) -> exactly-once Delta Lake tables."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema

from streamwarden.atomic import read_json
from streamwarden.runfiles.checkpoint import INITIAL_OFFSETS_FILE
from streamwarden.runfiles.handler_pin import HANDLER_FILE, layout_buckets, pin_handler
from streamwarden.session_handler import load_checked_handler
from streamwarden.settings import Settings
from streamwarden.stream.batch_writer import ArrowTable, BatchWrite, DeltaBatchWriter, PackedWrites, RowWrites
from streamwarden.stream.sessions.buckets import bucket_labels
from streamwarden.stream.sessions.engine import SessionPolicy
from streamwarden.stream.sessions.packing import (
    INPUT_COLUMNS,
    PACKED_INPUT_SCHEMA,
    PACKED_OUTPUT_SCHEMA,
    SESSION_BUCKET,
    SESSION_KEY,
    pack_by_bucket,
)
from streamwarden.stream.sessions.processor import SessionJobConfig, SessionProcessor
from streamwarden.stream.sessions.tables import KIND_DEAD, KIND_ROW, quarantine_schema, session_rows_schema
from streamwarden.stream.sink.batch_files import FOLDER_COLUMNS, with_folder_schema
from streamwarden.stream.sink.delta_sink import DeltaSink
from streamwarden.stream.source.kafka_source import SOURCE_NAME, KafkaDataSource
from streamwarden.tables.location import QUARANTINE, RECORDS, SESSION_ROWS, TableLocation
from streamwarden.wire import ColumnType, TableSchema

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

@dataclass(frozen=True)
class StateLayout:
    """Where the checkpoint keeps each session's state: its buckets, slots per bucket (0: one entry per
    session), the state partitions the buckets' labels are balanced for (0: their numbers, :mod:`.buckets`),
    the codec of the slots ("": plain) and how they expire ("": Spark's TTL, :mod:`.sessions.session_store`)."""

    buckets: int
    slots: int
    partitions: int = 0
    codec: str = ""
    expiry: str = ""

    @property
    def labels(self) -> tuple[int, ...]:
        """The grouping key of each bucket."""
        return bucket_labels(self.buckets, self.partitions)


def source_options(settings: Settings, layout: StateLayout | None = None) -> dict[str, str]:
    """Options for the Kafka source (same names for the Python source and Spark's JVM connector); the Python
    source packs the records into the ``layout``'s session buckets (none: one row per record)."""
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
            "stopMarkerPath": str(settings.run_paths.stop_marker),
            "initialOffsetsPath": str(settings.checkpoint_location / INITIAL_OFFSETS_FILE),
            "readTimeout": str(settings.read_timeout),
            "watermarkTimeout": str(settings.watermark_timeout),
            "brokerTimeout": str(settings.broker_timeout),
            "maxReadTasks": str(settings.read_tasks),
            "packSessionBuckets": str(layout.buckets if layout else 0),
            "bucketPartitions": str(layout.partitions if layout else 0),
        })
    return options


def register_source(spark: SparkSession, settings: Settings) -> None:
    """Register the Python Kafka source with the session (none for Spark's JVM connector). The JVM's first
    registration looks up the installed Python data sources in a Python process of its own (1-2 s), so a warm
    standby registers before it waits for the lease; again is a no-op in milliseconds."""
    if settings.source_impl == "python":
        spark.dataSource.register(KafkaDataSource)


def kafka_frame(spark: SparkSession, settings: Settings, layout: StateLayout | None = None) -> DataFrame:
    """The raw Kafka records as a streaming DataFrame (packed into the ``layout``'s buckets by the Python
    source)."""
    register_source(spark, settings)
    source = "kafka" if settings.source_impl == "jvm" else SOURCE_NAME
    return spark.readStream.format(source).options(**source_options(settings, layout)).load()


def pinned_handler(settings: Settings) -> tuple[Sequence[tuple[str, ColumnType]], StateLayout]:
    """The configured handler's output columns and the checkpoint's state layout, once the handler's fingerprint
    is pinned to the checkpoint (an existing checkpoint keeps its layout, a new one takes the settings')."""
    handler, columns = load_checked_handler(settings.session_handler, TableSchema.parse(settings.table_schema))
    recorded = read_json(settings.checkpoint_location / HANDLER_FILE)
    buckets = layout_buckets(recorded, settings.session_buckets, settings.state_buckets)
    pinned = pin_handler(settings.checkpoint_location, handler, buckets, settings.session_slots,
                         settings.state_partitions)
    return columns, StateLayout(buckets, pinned.get("session_slots", 0), pinned.get("bucket_partitions", 0),
                                pinned.get("slot_codec", ""), pinned.get("slot_expiry", ""))


def bucket_label(session: Column, layout: StateLayout) -> Column:
    """The label of a session's bucket, computed by Spark (the Python source's
    :func:`~streamwarden.stream.sessions.packing.with_session_buckets`, bit for bit)."""
    bucket = F.pmod(F.xxhash64(session), F.lit(layout.buckets))
    if layout.partitions == 0:  # a checkpoint from before labels: the bucket numbers are the grouping keys
        return bucket
    # one constant string the optimizer folds into one array literal: an array of one literal expression per
    # bucket took Spark 85 s for 700 keys and over 10 minutes for 20,000 at the largest bucket count (65,536), this
    # under a second
    labels = F.split(F.lit(",".join(map(str, layout.labels))), ",").cast("array<bigint>")
    return F.element_at(labels, (bucket + 1).cast("int"))


def session_frame(raw: DataFrame, settings: Settings, layout: StateLayout) -> DataFrame:
    """Group records by session id (the Kafka key) into buckets and run the session handler over each session.

    Records cross the shuffle and the operator packed per bucket, and its output leaves packed per kind
    (:mod:`streamwarden.stream.sessions.packing`)."""
    config = SessionJobConfig(
        handler_path=settings.session_handler,
        table_schema=dict(settings.table_schema),
        policy=SessionPolicy(settings.integrity_tier, settings.on_gap, settings.malformed_policy, settings.lateness,
                             settings.max_message_bytes),
        session_timeout_ms=int(settings.session_timeout * 1000),
        session_slots=layout.slots,
        slot_codec=layout.codec,
        slot_expiry=layout.expiry,
    )
    packed = raw  # the Python source packs where it reads
    if settings.source_impl == "jvm":
        session = F.coalesce(F.col("key").cast("string"), F.lit(""))
        keyed = raw.select(*INPUT_COLUMNS, session.alias(SESSION_KEY),
                           bucket_label(session, layout).alias(SESSION_BUCKET))
        packed = keyed.mapInArrow(pack_by_bucket, PACKED_INPUT_SCHEMA)
    return packed.groupBy(SESSION_BUCKET).transformWithStateInPandas(
        statefulProcessor=SessionProcessor(config),
        outputStructType=PACKED_OUTPUT_SCHEMA,
        outputMode="Append",
        timeMode="ProcessingTime",
    )


def _tables(settings: Settings, frame: DataFrame,
            columns: Sequence[tuple[str, ColumnType]]) -> tuple[list[DeltaSink], BatchWrite]:
    """The output tables, each created (or checked against its pinned schema) before the first batch, and how
    a batch's rows are written to them."""
    folders = [FOLDER_COLUMNS[c].name for c in settings.output_partition_by]

    def sink(table: str, schema: pa.Schema) -> DeltaSink:
        return DeltaSink(TableLocation.of(settings, table), schema, folders)

    compression = settings.output_compression
    if settings.pipeline == "records":
        schema = with_folder_schema(to_arrow_schema(frame.schema, timezone="UTC"))
        return [sink(RECORDS, schema)], RowWrites(ArrowTable(RECORDS, "timestamp"), compression)
    rows_schema = with_folder_schema(to_arrow_schema(session_rows_schema(columns), timezone="UTC"))
    dead_schema = with_folder_schema(to_arrow_schema(quarantine_schema(), timezone="UTC"))
    packed = {SESSION_ROWS: ArrowTable(KIND_ROW, "event_ts"), QUARANTINE: ArrowTable(KIND_DEAD, "kafka_timestamp")}
    return [sink(SESSION_ROWS, rows_schema), sink(QUARANTINE, dead_schema)], PackedWrites(packed, compression)


def start_query(spark: SparkSession, settings: Settings) -> StreamingQuery:
    """Start the stream; the commit protocols recover any interrupted commit first."""
    if settings.pipeline == "records":
        columns: Sequence[tuple[str, ColumnType]] = []
        frame = kafka_frame(spark, settings)
    else:
        columns, layout = pinned_handler(settings)
        frame = session_frame(kafka_frame(spark, settings, layout), settings, layout)
    sinks, write = _tables(settings, frame, columns)
    writer = DeltaBatchWriter(sinks, write, settings.checkpoint_location)
    return (
        frame.writeStream.queryName(settings.query_name)
        .foreachBatch(writer)
        .option("checkpointLocation", str(settings.checkpoint_location))
        .trigger(processingTime=f"{settings.trigger_interval} seconds")
        .start()
    )
