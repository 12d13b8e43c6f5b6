"""Records and output rows travel through the stateful operator packed, as Arrow IPC payloads per bucket.

PySpark's ``transformWithStateInPandas`` moves rows between the JVM and its Python worker one Python object
at a time (its serializer iterates ``itertuples`` over every input row and builds frames from row tuples;
the output goes through pandas to Arrow again). Measured on 2 cores, that conversion was about half of the
stateful stage's CPU. So rows do not cross it one by one:

1. **Before the shuffle** (:func:`pack_by_bucket`): a read task's records, with their session id and
   bucket label (:mod:`.buckets`), are sorted by bucket and each bucket's run is written as one Arrow IPC
   stream: one row ``(session_bucket, records)`` per bucket and task. The Python Kafka source does it where it reads
   (:func:`with_session_buckets` computes Spark's bucket bit for bit), so records never become JVM rows;
   behind Spark's own Kafka connector, Spark computes the bucket and a ``mapInArrow`` packs.
2. **In the operator** (:func:`unpack_records`, :func:`kafka_order`): a bucket's payloads are read back into one
   Arrow table and ordered by (topic, partition, offset); its columns become Python lists in one call each, taken
   in that order.
3. **Out of the operator** (:func:`pack_rows`): the applied rows and the dead letters of a bucket are built
   column by column as Arrow record batches with the tables' exact schemas, one output row
   ``(kind, rows, payload)`` per kind and chunk of rows
   (:data:`~streamwarden.stream.sessions.processor.OUTPUT_CHUNK_ROWS`).
4. **In the batch writer**: the tasks that ran the operator write each table's payloads as its Parquet
   files (:class:`~streamwarden.stream.sink.batch_files.PackedFiles`), checked against the ``rows`` the
   operator declared.

Nothing here is state: the grouping key and the state layout are the operator's, unchanged by packing.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.compute as pc  # type: ignore[import-untyped, unused-ignore]
import xxhash
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

from streamwarden.stream.ipc import from_ipc, to_ipc
from streamwarden.tables.batches import regrouped, sorted_runs

SESSION_KEY, SESSION_BUCKET = "session_key", "session_bucket"
PACKED_RECORDS = "records"
PACKED_INPUT_SCHEMA = StructType([StructField(SESSION_BUCKET, LongType()), StructField(PACKED_RECORDS, BinaryType())])
"""What the operator receives: one row per bucket and read task, the bucket's records as an IPC payload."""
PACKED_OUTPUT_SCHEMA = StructType([StructField("kind", StringType()), StructField("rows", LongType()),
                                   StructField("payload", BinaryType())])
"""What the operator emits: per bucket, kind (applied rows, dead letters) and chunk, their count and payload."""
INPUT_COLUMNS = ["topic", "partition", "offset", "key", "value", "timestamp"]
"""The Kafka columns a session's records keep."""
XXHASH_SEED = 42
"""The seed of Spark's ``xxhash64``."""
FLUSH_ROWS = 50_000
FLUSH_BYTES = 8 * 1024 * 1024
"""A read task packs at most :data:`FLUSH_ROWS` records, or about this many bytes of them, at once (bounds its
memory on large batches: 50k 10-row snapshots are ~35 MB, 50k updates ~7 MB)."""


def session_bucket(key: bytes | None, buckets: int) -> int:
    """Spark's ``pmod(xxhash64(coalesce(cast(key as string), '')), buckets)`` for one Kafka key."""
    digest = xxhash.xxh64_intdigest(key or b"", seed=XXHASH_SEED)
    return (digest - (1 << 64) if digest >= 1 << 63 else digest) % buckets  # signed, as Spark's long


def with_session_buckets(records: pa.RecordBatch, labels: Sequence[int]) -> pa.RecordBatch:
    """The source's records as the packing step takes them: :data:`INPUT_COLUMNS`, the session id (the key as
    text; an invalid UTF-8 key, a dead letter anyway, gets replacement characters) and its bucket's label
    (``labels[bucket]``, :func:`~streamwarden.stream.sessions.buckets.bucket_labels`)."""
    keys = records.column("key").to_pylist()
    columns = [records.column(name) for name in INPUT_COLUMNS]
    sessions = pa.array(["" if k is None else k.decode("utf-8", "replace") for k in keys], pa.string())
    buckets = len(labels)
    bucket_ids = pa.array([labels[session_bucket(k, buckets)] for k in keys], pa.int64())
    return pa.RecordBatch.from_arrays([*columns, sessions, bucket_ids],
                                      names=[*INPUT_COLUMNS, SESSION_KEY, SESSION_BUCKET])


def pack_by_bucket(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Step 1 (``mapInArrow``): a task's records (with ``session_bucket``) as one payload per bucket."""
    for table in regrouped(batches, FLUSH_ROWS, FLUSH_BYTES):
        yield _packed(table)


def _packed(table: pa.Table) -> pa.RecordBatch:
    order, runs = sorted_runs(table.column(SESSION_BUCKET).to_numpy())
    table = table.take(pa.array(order)).drop_columns([SESSION_BUCKET])
    return pa.RecordBatch.from_arrays([pa.array([bucket for bucket, _, _ in runs], pa.int64()),
                                       pa.array([to_ipc(table.slice(start, count)) for _, start, count in runs],
                                                pa.binary())],
                                      names=[SESSION_BUCKET, PACKED_RECORDS])


def unpack_records(payloads: list[bytes]) -> pa.Table:
    """Step 2: a bucket's records of this batch as they arrived: after a shuffle, in no particular order, possibly
    in several payloads (:func:`kafka_order` orders them)."""
    return pa.concat_tables([from_ipc(payload) for payload in payloads])


def kafka_order(records: pa.Table) -> np.ndarray:
    """The positions of ``records`` in (topic, partition, offset) order, as ``sort_by`` would order them, without
    moving the records: their values are most of a bucket's bytes (taking them costs 15x the sort)."""
    topics = pc.dictionary_encode(records.column("topic")).combine_chunks()
    by_name = np.argsort(np.argsort(topics.dictionary.to_numpy(zero_copy_only=False), kind="stable"))
    return np.lexsort((records.column("offset").to_numpy(), records.column("partition").to_numpy(),
                       by_name[topics.indices.to_numpy()]))


def pack_rows(kind: str, batch: pa.RecordBatch) -> tuple[str, int, bytes]:
    """Step 3: one output row of the operator, carrying ``batch`` (rows of one table)."""
    return kind, batch.num_rows, to_ipc(batch)
