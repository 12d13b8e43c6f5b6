"""Session bucket labels: the grouping key each bucket carries, chosen so every state partition gets as many.

A session's bucket is ``pmod(xxhash64(session id), buckets)``: a number ``0 .. buckets - 1``. Spark sends each
grouping key to the state partition ``pmod(murmur3(key, seed 42), partitions)``, and the bucket numbers
themselves land there unevenly: 16 buckets on 2 partitions split 7 / 9, 64 on 8 between 5 and 12, so one task
of every stateful stage does up to 1.5x its share while the others wait.

A checkpoint started since 2026-11-25 gives bucket ``i`` the label ``labels[i]`` of :func:`bucket_labels`:
the smallest non-negative longs whose partitions come out even (each partition ``floor`` or ``ceil`` of
``buckets / partitions``)::

    >>> bucket_labels(16, 2)     # 8 labels per partition: 13 would be the ninth on its partition
    (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 14, 15, 16)
    >>> bucket_labels(4, 0)      # a checkpoint from before: the bucket numbers are the labels
    (0, 1, 2, 3)

The labels are the grouping keys the state is stored under, so a checkpoint keeps the partition count its
labels were balanced for (``bucket_partitions`` in its pinned handler fingerprint; absent, 0, for older
checkpoints), whatever the settings say later.
"""

from __future__ import annotations

import functools

SPARK_HASH_SEED = 42
"""The seed of Spark's ``Murmur3Hash`` (``hash()``), which its hash partitioning uses."""
_MASK32 = 0xFFFFFFFF


def _mix_k1(k1: int) -> int:
    k1 = (k1 * 0xCC9E2D51) & _MASK32
    k1 = ((k1 << 15) | (k1 >> 17)) & _MASK32
    return (k1 * 0x1B873593) & _MASK32


def _mix_h1(h1: int, k1: int) -> int:
    h1 ^= k1
    h1 = ((h1 << 13) | (h1 >> 19)) & _MASK32
    return (h1 * 5 + 0xE6546B64) & _MASK32


def spark_hash_long(value: int, seed: int = SPARK_HASH_SEED) -> int:
    """Spark's ``Murmur3_x86_32.hashLong``: ``hash(cast(value as long))``, a signed 32-bit int."""
    value &= 0xFFFFFFFFFFFFFFFF
    h1 = _mix_h1(_mix_h1(seed, _mix_k1(value & _MASK32)), _mix_k1(value >> 32))
    h1 ^= 8  # the length in bytes
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _MASK32
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _MASK32
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 >= 1 << 31 else h1


def state_partition(label: int, partitions: int) -> int:
    """The state partition Spark's hash partitioning sends the grouping key ``label`` (a long) to."""
    return spark_hash_long(label) % partitions  # Python's % of a negative hash is Spark's pmod


@functools.lru_cache(maxsize=16)
def bucket_labels(buckets: int, partitions: int) -> tuple[int, ...]:
    """The label of each bucket: balanced over ``partitions`` state partitions, or the bucket numbers when
    ``partitions`` is 0 (checkpoints from before labels).

    Scans ``0, 1, 2, ...`` and keeps a label while its partition holds fewer than ``buckets // partitions``,
    or exactly that many and fewer than ``buckets % partitions`` partitions have taken one more."""
    if buckets <= 0 or partitions < 0:
        raise ValueError(f"bucket labels need buckets > 0 and partitions >= 0, got {buckets} and {partitions}")
    if partitions == 0:
        return tuple(range(buckets))
    base, extra = divmod(buckets, partitions)
    held = [0] * partitions
    labels: list[int] = []
    candidate = 0
    while len(labels) < buckets:
        partition = state_partition(candidate, partitions)
        if held[partition] < base or (held[partition] == base and extra > 0):
            if held[partition] == base:
                extra -= 1
            held[partition] += 1
            labels.append(candidate)
        candidate += 1
    return tuple(labels)
