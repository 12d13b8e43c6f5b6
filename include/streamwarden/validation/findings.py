"""What a validation run can find wrong, as typed findings: the class, the evidence, and the next action.

A finding names the table (or none, for a fact of Kafka alone), the topic-partition, the offsets concerned
as half-open ranges ``[start, end)`` (the first few; ``count`` is exact), and what was seen in words. The
class decides the next action a person is told; it is the same text for every finding of the class.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, TypeVar

from streamwarden.tables.storage import FileFault, FileProblem

Interval = tuple[int, int]
Row = TypeVar("Row")


class FindingClass(StrEnum):
    """Why a validation run failed."""

    INTEGRITY = "INTEGRITY"  # a data file's bytes are not those hashed when it was committed
    STORAGE = "STORAGE"  # a data file the log lists is missing from storage, not at its recorded size, or unreadable
    GAP = "GAP"  # offsets the log records as committed that no table holds
    DUPLICATE = "DUPLICATE"  # an offset in both tables, a row twice, or rows no committed run claims
    CHECKPOINT_MISMATCH = "CHECKPOINT_MISMATCH"  # the checkpoint and the tables disagree beyond one batch
    DATA_EXPIRED = "DATA_EXPIRED"  # offsets Kafka deleted before the stream read them
    AUDIT_MISMATCH = "AUDIT_MISMATCH"  # per-hour counts in Kafka and in the tables differ
    EXPECTATION_FAILED = "EXPECTATION_FAILED"  # a data expectation on the rows failed
    STALE = "STALE"  # the tables fall behind Kafka: no progress, or unread data expires before it is read
    EXPOSURE = "EXPOSURE"  # a site without a clean session start for longer than 1.5 restart intervals


NEXT_ACTIONS: dict[FindingClass, str] = {
    FindingClass.INTEGRITY: (
        "A data file's bytes changed after it was committed (a bit flipped on a disk, a hand edit, a bad copy): its "
        "size and offsets still agree with the Delta log, so readers read its rows without error, but some values "
        "are not the ones the stream wrote. Do not run maintain_tables on the table until it is repaired (its "
        "compaction refuses the file anyway). Put the file back from a backup or the store's object versioning if "
        "you can (same path; `sha256sum` must print the digest the finding names as recorded); otherwise trigger "
        "recover_stream with as_of just before the time the file was written (named in the finding): it rolls "
        "the table back to before that file and replays its offsets from Kafka while Kafka still holds them."),
    FindingClass.STORAGE: (
        "A data file the Delta log lists is gone from storage, cut short, or cannot be read (an rm, a lifecycle "
        "rule that deleted it or moved it to an archive tier, a failed copy, permissions): readers of the table "
        "fail on it, and the rows it held are missing (their offsets are the GAP findings of the same table). Do "
        "not run maintain_tables on the table until it is repaired. An unreadable file may only need its access "
        "or its storage tier restored (the finding names what reading it said). Otherwise put the file back "
        "from a backup or the store's object versioning if you can (same path, the size the finding names); "
        "otherwise trigger recover_stream with as_of just before the time the file was written (named in the "
        "finding): it rolls the table back to before that file and replays its offsets from Kafka while Kafka "
        "still holds them."),
    FindingClass.GAP: (
        "Offsets the Delta log records as committed have no row in any table: their rows were removed from the "
        "table (a file dropped from the log, a restore, a delete). Do not let the stream or maintenance touch the "
        "table's history: find the commit that removed them (`streamwarden tables`, the table's history), then "
        "run recover_stream to roll the table back to the last validated version, or re-read the offsets from "
        "Kafka while it still holds them."),
    FindingClass.DUPLICATE: (
        "Rows are held twice (an offset in both tables, the same row committed twice, or rows committed "
        "without their offsets: another writer). Readers double-count them until they are removed. Find the "
        "commit that added them (its app transactions and commit info), stop any second writer, then remove the "
        "extra files with a commit or run recover_stream to the last validated version."),
    FindingClass.CHECKPOINT_MISMATCH: (
        "The stream's checkpoint and the tables disagree by more than the one batch in flight. Checkpoint past "
        "the tables: the stream will not replay the missing offsets; stop it, and restart it from the tables' "
        "offsets (a new checkpoint with STREAMWARDEN_STARTING_OFFSETS at the offsets named). Tables past the "
        "checkpoint: the checkpoint was replaced or restored; the sink skips offsets the tables hold, so check "
        "only that STREAMWARDEN_QUERY_NAME and the checkpoint root are the intended ones."),
    FindingClass.DATA_EXPIRED: (
        "Kafka deleted offsets before the stream read them: they are lost from this pipeline. Recover them from "
        "the producers or a Kafka backup if one exists, record the loss, and raise the topics' retention.ms or "
        "the stream's throughput so it does not happen again."),
    FindingClass.AUDIT_MISMATCH: (
        "Messages per hour in Kafka and rows accounted for in the tables differ for a retained hour. Compare the "
        "hour's offsets in both (the evidence names them) and look for a gap or a duplicate there."),
    FindingClass.EXPECTATION_FAILED: (
        "Rows break a data expectation. Look at the rows named, then fix the producer or the session handler; "
        "the offsets themselves are accounted for."),
    FindingClass.STALE: (
        "The tables fall behind Kafka. Check stream_supervisor (is the stream running, is it keeping up?) and "
        "its last failure; when unread data is about to expire, raise the topics' retention.ms or the stream's "
        "resources now."),
    FindingClass.EXPOSURE: (
        "A site has gone longer than the limit without a clean session start: a break in its data since then "
        "would not have been repaired (its damaged sessions are named). Trigger restart_sessions for the sites "
        "named; if they do not answer, check the collection points; if restarts are not scheduled, set "
        "STREAMWARDEN_SESSION_RESTART_SCHEDULE."),
}


@dataclass(frozen=True)
class Finding:
    """One thing wrong, with its evidence."""

    finding_class: FindingClass
    table: str | None  # None when the finding is about Kafka or the checkpoint alone
    topic: str
    partition: int
    ranges: tuple[Interval, ...]  # the offsets concerned, [start, end) (the first few)
    count: int  # offsets (or, for repeated rows, extra rows) concerned, exactly
    detail: str
    # STORAGE, INTEGRITY: when the damaged file was written (a recovery goes back before it)
    written_at: str | None = None

    @property
    def next_action(self) -> str:
        return NEXT_ACTIONS[self.finding_class]

    def to_json(self) -> dict[str, Any]:
        return {"class": self.finding_class.value, "table": self.table, "topic": self.topic,
                "partition": self.partition, "ranges": [list(r) for r in self.ranges], "count": self.count,
                "detail": self.detail, "next_action": self.next_action,
                **({"written_at": self.written_at} if self.written_at else {})}

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> Finding:
        return cls(FindingClass(document["class"]), document["table"], document["topic"], int(document["partition"]),
                   tuple((int(s), int(e)) for s, e in document["ranges"]), int(document["count"]),
                   str(document["detail"]), document.get("written_at"))

    def line(self) -> str:
        """The finding in one line for the log."""
        shown = ", ".join(f"[{s}, {e})" for s, e in self.ranges)
        where = f"{self.table}: " if self.table else ""
        partition = "" if self.partition < 0 else f"[{self.partition}]"  # -1: the whole topic (a site)
        return (f"{self.finding_class.value} {where}{self.topic}{partition} {self.count:,} "
                f"{'' if not shown else f'at {shown} '}- {self.detail}")


@dataclass(frozen=True)
class Outcome(Generic[Row]):
    """What a check against Kafka found: its figures (``rows``), its findings, or why Kafka could not answer
    (``error``: no finding then, a note in the report)."""

    rows: tuple[Row, ...] = ()
    findings: tuple[Finding, ...] = ()
    error: str | None = None


def storage_finding(problem: FileProblem) -> Finding:
    """The finding of one data file storage lacks or holds damaged (STORAGE; INTEGRITY when it is whole but its
    bytes changed): the Kafka partition and offsets its add action's statistics name (the whole topic, ``-1``,
    when it held several partitions)."""
    held = problem.held
    single = held.partitions is not None and held.partitions[0] == held.partitions[1]
    partition = held.partitions[0] if single and held.partitions is not None else -1
    ranges = (held.offsets,) if single and held.offsets is not None else ()
    finding_class = FindingClass.INTEGRITY if problem.fault is FileFault.CHANGED else FindingClass.STORAGE
    return Finding(finding_class, problem.table, held.topic or "", partition, ranges, held.rows or 0,
                   problem.line(), problem.written_at)
