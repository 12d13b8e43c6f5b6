"""Why a site's answer is not in ``session_rows``: the site did not answer, or the stream did not read that far.

A site answers a restart request with a snapshot record on its topic before its deadline. The stream can have
put that record in ``session_rows`` only if it committed every record the topic held by the deadline: on every
partition of the topic, the record at the stream's committed position (the checkpoint's) was written after the
deadline (Kafka's timestamp), or there is none (the log ends there). Then a missing answer is the site's
(``SITE_SILENT``). Otherwise the answer, if the site sent one, waits in Kafka unread, and the stream is to
blame: it committed nothing after the deadline (``STREAM_NOT_RUNNING``: stopped, failed or hung), or it did
but had not caught up (``STREAM_BEHIND``). ``UNCHECKED``: the broker did not say where the stream stood.

Kafka's timestamps are the producers' clocks (CreateTime), the deadline the worker's: a site whose clock runs
late by more than the time between its answer and its deadline is taken for silent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from streamwarden.kafka.admin import TopicPartitionId, list_partitions, metadata_consumer
from streamwarden.runfiles.checkpoint import commit_batches, committed_offsets
from streamwarden.runfiles.failure_file import read_failure
from streamwarden.session_restarts.plan import SiteTurn
from streamwarden.settings import Settings
from streamwarden.warden.broker_view import BROKER_ERRORS, timestamps_at
from streamwarden.warden.launcher import running_holder


class Cause(StrEnum):
    """Why a site's answer is missing from the table."""

    SITE_SILENT = "SITE_SILENT"
    STREAM_NOT_RUNNING = "STREAM_NOT_RUNNING"
    STREAM_BEHIND = "STREAM_BEHIND"
    UNCHECKED = "UNCHECKED"

    @property
    def stream(self) -> bool:
        """The stream is to blame: the answer may be in Kafka, unread."""
        return self in (Cause.STREAM_NOT_RUNNING, Cause.STREAM_BEHIND)


@dataclass(frozen=True)
class StreamDuring:
    """The stream as the checkpoint, the lease and the failure document show it after the wait."""

    last_commit_at: datetime | None  # when its newest batch was committed (None: never)
    last_batch: int | None
    running_pid: int | None  # the live lease holder now (None: no process holds the lease)
    failure: str | None  # the last failure document's class and message, when one is kept

    def describe(self) -> str:
        commit = ("it never committed a batch" if self.last_commit_at is None else
                  f"its last commit: batch {self.last_batch} at {self.last_commit_at:%Y-%m-%d %H:%M:%S} UTC")
        now = (f"pid {self.running_pid} holds the checkpoint lease" if self.running_pid is not None else
               "no process holds the checkpoint lease" + (f" (last failure {self.failure})" if self.failure else ""))
        return f"{commit}; now {now}"

    def to_json(self) -> dict[str, Any]:
        return {"last_commit_at": None if self.last_commit_at is None else self.last_commit_at.isoformat(),
                "last_batch": self.last_batch, "running_pid": self.running_pid, "failure": self.failure}


@dataclass(frozen=True)
class SiteReach:
    """One unanswered site: the cause, and per partition of its topic the stream's committed position and when
    the record there was written (``None``: the log ends there; absent: the broker did not say)."""

    site: str
    request_id: str
    deadline: datetime
    cause: Cause
    positions: dict[int, int]
    written_at: dict[int, float | None]
    why_unchecked: str | None = None

    def evidence(self) -> str:
        """Where the stream stood on the site's partitions against the deadline."""
        if self.why_unchecked:
            return f"where the stream stood on {self.site} is unknown: {self.why_unchecked}"
        deadline = self.deadline.timestamp()
        unread = {p: at for p, at in sorted(self.written_at.items()) if at is not None and at <= deadline}
        if not unread:
            return (f"the stream had read every record of {self.site} written by the deadline "
                    f"{self.deadline:%H:%M:%S} UTC, none answers {self.request_id}")
        shown = ", ".join(f"{self.site}[{p}]@{self.positions[p]:,} written "
                          f"{datetime.fromtimestamp(at, UTC):%H:%M:%S}" for p, at in list(unread.items())[:4])
        return (f"the stream's committed position on {self.site} is before records written by the deadline "
                f"{self.deadline:%H:%M:%S} UTC ({shown}): its answer to {self.request_id}, if sent, is in Kafka, "
                "unread")

    def to_json(self) -> dict[str, Any]:
        return {"site": self.site, "request_id": self.request_id, "cause": self.cause.value,
                "positions": {str(p): o for p, o in self.positions.items()},
                "written_at": {str(p): at for p, at in self.written_at.items()}, "why_unchecked": self.why_unchecked,
                "evidence": self.evidence()}


def stream_during(settings: Settings) -> StreamDuring:
    """The stream's last commit (the checkpoint's commit log), its lease holder and its last failure now."""
    commits = commit_batches(settings.checkpoint_location)
    last = commits[-1] if commits else None
    at = None if last is None else datetime.fromtimestamp(
        (settings.checkpoint_location / "commits" / str(last)).stat().st_mtime, UTC)
    holder = running_holder(settings)
    failure = read_failure(settings.run_paths.failure)
    return StreamDuring(at, last, None if holder is None else holder.pid,
                        None if failure is None else f"{failure.failure_class.value}: {failure.message[:200]}")


def reach(settings: Settings, turns: Sequence[SiteTurn], stream: StreamDuring, timeout: float = 10.0
          ) -> dict[str, SiteReach]:
    """Why each of ``turns`` (unanswered sites) has no answer in the table, by request id."""
    if not turns:
        return {}
    committed = committed_offsets(settings.checkpoint_location) or {}
    sites = {t.site for t in turns}
    consumer = metadata_consumer(settings.kafka_client_config())
    try:
        partitions = [tp for tp in list_partitions(consumer, settings.topic_pattern, timeout) if tp.topic in sites]
        # no committed offset: the stream has read nothing there; offset 0 resets to the log's first record
        positions = {tp: committed.get(tp.topic, {}).get(str(tp.partition), 0) for tp in partitions}
        written = timestamps_at(consumer, positions, timeout)
    except BROKER_ERRORS as exc:
        why = str(exc).split(" [streamwarden:")[0] or type(exc).__name__
        return {t.request_id: SiteReach(t.site, t.request_id, t.deadline, Cause.UNCHECKED, {}, {}, why) for t in turns}
    finally:
        consumer.close()
    return {t.request_id: _judge(t, positions, written, stream) for t in turns}


def _judge(turn: SiteTurn, positions: dict[TopicPartitionId, int], written: dict[TopicPartitionId, float | None],
           stream: StreamDuring) -> SiteReach:
    mine = sorted(tp for tp in positions if tp.topic == turn.site)
    own_positions = {tp.partition: positions[tp] for tp in mine}
    own_written = {tp.partition: written[tp] for tp in mine if tp in written}
    deadline = turn.deadline.timestamp()
    if any(at is not None and at <= deadline for at in own_written.values()):
        ran = stream.last_commit_at is not None and stream.last_commit_at >= turn.deadline
        cause = Cause.STREAM_BEHIND if ran else Cause.STREAM_NOT_RUNNING
        return SiteReach(turn.site, turn.request_id, turn.deadline, cause, own_positions, own_written)
    silent = [tp.partition for tp in mine if tp not in written]
    if not mine or silent:
        why = (f"no partition of {turn.site} on the broker" if not mine else
               f"the broker did not answer for {turn.site}[{', '.join(map(str, silent))}] in time")
        return SiteReach(turn.site, turn.request_id, turn.deadline, Cause.UNCHECKED, own_positions, own_written, why)
    return SiteReach(turn.site, turn.request_id, turn.deadline, Cause.SITE_SILENT, own_positions, own_written)
