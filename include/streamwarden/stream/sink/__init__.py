"""Exactly-once Parquet sink: offset-range arithmetic and the staged commit protocol."""

from streamwarden.stream.sink.commit_protocol import (
    BatchPlan,
    CommitProtocol,
    CommitProtocolError,
    CommittedFile,
    CommittedFileMissingError,
    Manifest,
    ManifestCorruptError,
    OverlappingCommitError,
    RecoveryReport,
    StagingMismatchError,
    load_manifests,
)
from streamwarden.stream.sink.ranges import IntervalIndex, OffsetRanges

__all__ = [
    "BatchPlan",
    "CommitProtocol",
    "CommitProtocolError",
    "CommittedFile",
    "CommittedFileMissingError",
    "IntervalIndex",
    "Manifest",
    "ManifestCorruptError",
    "OffsetRanges",
    "OverlappingCommitError",
    "RecoveryReport",
    "StagingMismatchError",
    "load_manifests",
]
