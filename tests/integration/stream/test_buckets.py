"""Bucket labels: Spark's hash of a long, and labels that give every state partition as many buckets."""

from __future__ import annotations

from collections import Counter

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from streamwarden.stream.sessions.buckets import bucket_labels, spark_hash_long, state_partition

LONGS = [0, 1, 2, 13, 63, -1, -123_456_789_012, 2**40 + 7, 2**63 - 1, -(2**63)]


def test_the_hash_of_a_long_is_sparks(spark: SparkSession) -> None:
    frame = spark.createDataFrame([(v,) for v in LONGS], "label LONG")
    assert [row[0] for row in frame.select(F.hash("label")).collect()] == [spark_hash_long(v) for v in LONGS]


@pytest.mark.parametrize(("buckets", "partitions"), [(16, 2), (64, 8), (5, 2), (5, 4), (3, 8), (100, 7)])
def test_spark_sends_every_partition_as_many_labels(spark: SparkSession, buckets: int, partitions: int) -> None:
    """Through Spark's own hash partitioning (the stateful operator's shuffle uses the same), each partition
    gets ``floor`` or ``ceil`` of buckets / partitions; the bucket numbers do not (16 on 2: 7 / 9)."""
    def spread(labels: tuple[int, ...]) -> list[int]:
        frame = spark.createDataFrame([(label,) for label in labels], "session_bucket LONG")
        placed = frame.repartition(partitions, "session_bucket").select(F.spark_partition_id()).collect()
        counts = Counter(row[0] for row in placed)
        assert counts == Counter(state_partition(label, partitions) for label in labels)  # our model of it
        return sorted(counts[p] for p in range(partitions))

    labels = bucket_labels(buckets, partitions)
    assert len(set(labels)) == buckets and min(labels) >= 0
    low, high = divmod(buckets, partitions)
    assert spread(labels) == [low] * (partitions - high) + [low + 1] * high
    if (buckets, partitions) == (16, 2):
        assert spread(bucket_labels(buckets, 0)) == [7, 9]


def test_a_checkpoint_from_before_labels_keeps_the_bucket_numbers() -> None:
    assert bucket_labels(16, 0) == tuple(range(16))
    assert bucket_labels(16, 2)[:3] == (0, 1, 2)  # the smallest longs that keep the balance, in order
    with pytest.raises(ValueError, match="buckets > 0"):
        bucket_labels(0, 2)
