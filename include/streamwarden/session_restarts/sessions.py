"""What the output tables say about the sites' sessions: answers to restart requests, exposure, data lost.

Read with DuckDB over pyarrow datasets of one version of ``session_rows`` and ``quarantine`` (the newest,
or the versions a validation run pinned), using the framework's columns only, so any session handler works:

* an **answer** to a request is a snapshot row whose ``restart_request`` names it;
* a session's **clean start** is its newest row with ``boundary`` ``start``, ``snapshot`` or ``resync``; it
  is **open** until a row with ``boundary`` ``end`` (or an ``end`` that went to quarantine), or until it has
  been silent for ``STREAMWARDEN_SESSION_TIMEOUT`` (the stream released its state); it is **damaged** when an
  integrity dead letter (``SEQUENCE_GAP``, ``DUPLICATE_SEQ``, ``UPDATE_BEFORE_SNAPSHOT``, ``RESYNC_SKIPPED``)
  follows its clean start;
* a site's **exposure** is the age of the clean start of its oldest open session: how long a break in its
  data could have gone unrepaired (the time since its newest clean start when it has none open);
* a site's **loss** is its integrity dead letters in a window: records the stream could not apply.

Times are the sites' event times (``event_ts``) for sessions, Kafka's timestamps for dead letters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import duckdb
import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.dataset as ds  # type: ignore[import-untyped, unused-ignore]

INTEGRITY_CLASSES = ("SEQUENCE_GAP", "DUPLICATE_SEQ", "UPDATE_BEFORE_SNAPSHOT", "RESYNC_SKIPPED")
CLEAN_STARTS = ("start", "snapshot", "resync")
SESSION_COLUMNS = ("topic", "partition", "offset", "session_id", "event_ts", "boundary", "restart_request")
"""The framework's columns of ``session_rows`` read here."""
_IN_INTEGRITY = "error_class IN ({})".format(", ".join(f"'{c}'" for c in INTEGRITY_CLASSES))
CLEAN_BOUNDARY = "boundary IN ({})".format(", ".join(f"'{c}'" for c in CLEAN_STARTS))


def _time(micros: int | None) -> datetime | None:
    return None if micros is None else datetime.fromtimestamp(micros / 1e6, UTC)


@dataclass(frozen=True)
class Answer:
    """A site's first new session answering a request, as the output table holds it."""

    site: str
    request_id: str
    opened_at: datetime
    sessions: int
    partition: int
    offset: int

    def to_json(self) -> dict[str, object]:
        return {"site": self.site, "request_id": self.request_id, "opened_at": self.opened_at.isoformat(),
                "sessions": self.sessions, "partition": self.partition, "offset": self.offset}


@dataclass(frozen=True)
class SiteSessions:
    """A site's sessions at one version of the table."""

    site: str
    open_sessions: int
    damaged_sessions: int
    oldest_open_start: datetime | None
    newest_clean_start: datetime | None

    @property
    def last_clean_start(self) -> datetime | None:
        """Since when every open session of the site is known clean (its oldest open session's clean start)."""
        return self.oldest_open_start or self.newest_clean_start

    def exposure(self, now: datetime) -> float | None:
        """Seconds since :attr:`last_clean_start`; None for a site that never started a session."""
        start = self.last_clean_start
        return None if start is None else max(0.0, (now - start).total_seconds())

    def to_json(self, now: datetime) -> dict[str, object]:
        start = self.last_clean_start
        return {"site": self.site, "open_sessions": self.open_sessions, "damaged_sessions": self.damaged_sessions,
                "last_clean_start": None if start is None else start.isoformat(), "exposure_s": self.exposure(now)}


@dataclass(frozen=True)
class SiteLoss:
    """A site's integrity dead letters in a window: the records the stream could not apply."""

    site: str
    records: int
    sessions: int
    offsets: tuple[tuple[int, int, int], ...]  # (partition, first, last)
    first_at: datetime
    last_at: datetime

    @property
    def span_s(self) -> float:
        """Seconds from the first record lost to the last."""
        return (self.last_at - self.first_at).total_seconds()

    def to_json(self) -> dict[str, object]:
        return {"site": self.site, "records": self.records, "sessions": self.sessions,
                "offsets": [list(o) for o in self.offsets], "first_at": self.first_at.isoformat(),
                "last_at": self.last_at.isoformat(), "span_s": self.span_s}


def find_answers(con: duckdb.DuckDBPyConnection, rows: ds.Dataset, request_ids: Sequence[str]) -> dict[str, Answer]:
    """The answers to ``request_ids`` found in ``rows`` (session_rows), by request id."""
    if not request_ids:
        return {}
    con.register("answer_rows", rows)
    found = con.execute(
        'SELECT restart_request, topic, epoch_us(min(event_ts)), count(DISTINCT session_id), min("partition"), '
        'min("offset") FROM answer_rows WHERE restart_request IS NOT NULL AND restart_request IN (SELECT unnest(?)) '
        "GROUP BY restart_request, topic", [list(request_ids)]).fetchall()
    answers = {}
    for request_id, site, opened, sessions, partition, offset in found:
        opened_at = _time(opened)
        if opened_at is not None:
            answers[request_id] = Answer(site, request_id, opened_at, sessions, partition, offset)
    return answers


def measure_sites(con: duckdb.DuckDBPyConnection, rows: ds.Dataset, dead: ds.Dataset | None, *, now: datetime,
                  session_timeout: float) -> dict[str, SiteSessions]:
    """Each site's open, damaged and oldest sessions (see the module's words), by site."""
    con.register("exposure_rows", rows)
    con.register("exposure_dead", dead if dead is not None else _empty_dead())
    cutoff = int((now.timestamp() - session_timeout) * 1e6)
    found = con.execute(f"""
        WITH sessions AS (
            SELECT topic, session_id, max("offset") FILTER (WHERE {CLEAN_BOUNDARY}) AS clean_offset,
                   arg_max(event_ts, "offset") FILTER (WHERE {CLEAN_BOUNDARY}) AS clean_start,
                   bool_or(boundary = 'end') AS ended, max(event_ts) AS last_seen
            FROM exposure_rows GROUP BY topic, session_id),
        damage AS (
            SELECT topic, decode(key) AS session_id, max("offset") AS dead_offset,
                   bool_or(try(json_extract_string(decode(value), '$.type')) = 'end') AS dead_end
            FROM exposure_dead WHERE {_IN_INTEGRITY} AND key IS NOT NULL GROUP BY topic, decode(key)),
        judged AS (
            SELECT s.topic, s.clean_start, coalesce(d.dead_offset > s.clean_offset, false) AS damaged,
                   s.clean_start IS NOT NULL AND NOT (s.ended OR coalesce(d.dead_end, false))
                   AND epoch_us(s.last_seen) >= ? AS open
            FROM sessions s LEFT JOIN damage d USING (topic, session_id))
        SELECT topic, count(*) FILTER (WHERE open), count(*) FILTER (WHERE open AND damaged),
               epoch_us(min(clean_start) FILTER (WHERE open)), epoch_us(max(clean_start))
        FROM judged GROUP BY topic ORDER BY topic""", [cutoff]).fetchall()
    return {site: SiteSessions(site, opened, damaged, _time(oldest), _time(newest))
            for site, opened, damaged, oldest, newest in found}


def measure_losses(con: duckdb.DuckDBPyConnection, dead: ds.Dataset | None,
                   since: Mapping[str, datetime] | None = None) -> dict[str, SiteLoss]:
    """Each site's integrity dead letters (all, or from ``since[site]`` on for the sites it names), by site."""
    if dead is None:
        return {}
    con.register("loss_dead", dead)
    given = since or {}
    con.register("loss_since", pa.table({"topic": pa.array(list(given), pa.string()),
                                         "since_us": pa.array([int(t.timestamp() * 1e6) for t in given.values()],
                                                              pa.int64())}))
    found = con.execute(f"""
        SELECT d.topic, "partition", count(*), count(DISTINCT key), min("offset"), max("offset"),
               epoch_us(min(kafka_timestamp)), epoch_us(max(kafka_timestamp))
        FROM loss_dead d LEFT JOIN loss_since s USING (topic)
        WHERE {_IN_INTEGRITY} AND (s.since_us IS NULL OR epoch_us(d.kafka_timestamp) >= s.since_us)
        GROUP BY d.topic, "partition" ORDER BY d.topic, "partition" """).fetchall()
    losses: dict[str, SiteLoss] = {}
    for site, partition, records, sessions, first, last, first_us, last_us in found:
        first_at, last_at = _time(first_us), _time(last_us)
        if first_at is None or last_at is None:
            continue
        before = losses.get(site)
        if before is None:
            losses[site] = SiteLoss(site, records, sessions, ((partition, first, last),), first_at, last_at)
        else:
            losses[site] = SiteLoss(site, before.records + records, before.sessions + sessions,
                                    (*before.offsets, (partition, first, last)), min(before.first_at, first_at),
                                    max(before.last_at, last_at))
    return losses


def _empty_dead() -> pa.Table:
    """A quarantine without rows (before the stream created it)."""
    return pa.table({"topic": pa.array([], pa.string()), "partition": pa.array([], pa.int32()),
                     "offset": pa.array([], pa.int64()), "key": pa.array([], pa.binary()),
                     "value": pa.array([], pa.binary()), "error_class": pa.array([], pa.string())})
