"""``streamwarden produce``: simulated collection points publishing snapshot/update sessions to Kafka.

Each site writes to ``<prefix>-<site>``. A session opens with a full snapshot, continues with row updates
and deletes, and closes with ``end``; then a new session (new id) takes its place. Sessions of all sites
interleave; the key is the session id, so a session stays in one partition, in ``seq`` order. The event
stream is a pure function of the seed (:class:`SessionSimulator`); only timestamps and the run id (part
of every session id, so a restart never reuses one) come from the clock.

The sites also obey the control topic (:mod:`streamwarden.control`): on a ``restart_session`` for one of
them (or ``*``), at its ``not_before``, that site ends its open sessions and opens as many new ones at once,
each snapshot naming the request. For drills, some sites can be told to ignore commands, and one
update or delete of one session can be left unsent (a ``seq`` gap).
"""

from __future__ import annotations

import argparse
import random
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from types import FrameType
from typing import Any, Literal, TypeAlias

from confluent_kafka import KafkaError, Message, Producer

from streamwarden.control.channel import CommandReader
from streamwarden.control.commands import RestartSession
from streamwarden.kafka.admin import create_topics
from streamwarden.settings import Settings
from streamwarden.settings_loading import validate_topic_name
from streamwarden.wire import (
    DEMO_SCHEMA,
    ColumnType,
    DeleteEvent,
    EndEvent,
    Row,
    SessionEvent,
    SnapshotEvent,
    Table,
    TableSchema,
    UpdateEvent,
    Value,
    apply_event,
    encode,
    format_ts,
)

StopReason = Literal["max_messages", "duration", "stop", "interrupt"]
Outgoing: TypeAlias = tuple[str, bytes, SessionEvent]
"""A message to send: (topic, key, event)."""
_WORDS: dict[str, tuple[str, ...]] = {
    "status": ("new", "open", "partial", "filled", "cancelled"),
    "venue": ("XPAR", "XLON", "XETR", "XAMS", "XMIL", "XNYS"),
}
_MAX_BATCH = 1000
_ERROR_SAMPLES = 5
_CONTROL_POLL_S = 0.2  # longest wait of the rate limiter, so commands are seen in time
_PRODUCER_DEFAULTS = {
    # The embedded broker keeps every record and its cost grows with the record batches it holds: a batch a
    # second per partition, compressed, takes ~120 bytes a message there instead of ~320 at 2,000 msg/s.
    "linger.ms": "1000",
    "compression.type": "lz4",
    "batch.num.messages": "10000",
    "queue.buffering.max.messages": "500000",
    "enable.idempotence": "true",  # retries never reorder a partition, so per-session seq order holds
}


@dataclass(frozen=True)
class ProducerOptions:
    """What to simulate and how fast; the defaults are the demo. Zero means "no limit" for the limits."""

    prefix: str = "sites"  # topics are <prefix>-<site>
    sites: int = 3
    partitions: int = 4  # of the topics created here
    sessions_per_site: int = 20  # open at once; an ended session is replaced by a new one
    rows_per_snapshot: int = 50
    updates_per_session: int = 200  # row messages (updates and deletes) between snapshot and end
    delete_ratio: float = 0.05  # share of row messages that delete; as many insert a new row
    rate: float = 0.0  # messages/s over all sites
    duration: float = 0.0  # seconds
    max_messages: int = 0
    seed: int = 1
    pad_to: int = 0  # pad every value to at least this many bytes
    create_topics: bool = True
    track_expected: bool = False  # report the expected final table of every open session
    schema: TableSchema = DEMO_SCHEMA
    run_id: str | None = None  # default: <seed>.<start time in ms, hex>
    progress_interval: float = 5.0  # seconds
    honour_restarts: bool = True  # obey restart_session commands on the control topic
    ignore_restarts: tuple[str, ...] = ()  # site topics that ignore them (drills)
    inject_gap: tuple[int, int] | None = None  # (site, after N messages): leave one row message unsent
    gap_every: int = 0  # after the first injected gap, another one each this many messages (0: only the first)

    def __post_init__(self) -> None:
        for name in ("sites", "partitions", "sessions_per_site", "progress_interval"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be greater than zero")
        validate_topic_name(f"{self.prefix}-{self.sites - 1}")
        counts = ("rows_per_snapshot", "updates_per_session", "rate", "duration", "max_messages", "pad_to",
                  "gap_every")
        for name in counts:
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")
        if not 0 <= self.delete_ratio <= 0.5:
            raise ValueError("delete_ratio must be between 0 and 0.5")
        if self.run_id is not None and not re.fullmatch(r"[A-Za-z0-9._]{1,32}", self.run_id):
            raise ValueError("run_id must be 1-32 of A-Z a-z 0-9 . _")
        strangers = [name for name in self.ignore_restarts if name not in self.topics]
        if strangers:
            raise ValueError(f"ignore_restarts names {', '.join(strangers)}: not among this producer's topics "
                             f"({', '.join(self.topics)})")
        if self.inject_gap is not None:
            self._check_gap(*self.inject_gap)

    def _check_gap(self, site: int, after: int) -> None:
        if not 0 <= site < self.sites:
            raise ValueError(f"inject_gap site {site} is not a site index (0..{self.sites - 1})")
        if after < 0:
            raise ValueError(f"inject_gap after {after} messages: must not be negative")
        if self.updates_per_session == 0:
            raise ValueError("inject_gap needs updates_per_session above zero (it drops an update or delete)")

    @property
    def topics(self) -> list[str]:
        return [f"{self.prefix}-{site}" for site in range(self.sites)]


def _value_maker(name: str, type_: ColumnType, rnd: Callable[[], float]) -> Callable[[datetime], Value]:
    """A generator of random values for one column (``timestamp`` columns get the event time)."""
    if type_ == "double":
        return lambda now: round(rnd() * 1000, 2)
    if type_ == "long":
        return lambda now: int(rnd() * 10_000)
    if type_ == "boolean":
        return lambda now: rnd() < 0.5
    if type_ == "timestamp":
        return format_ts
    words = _WORDS.get(name) or tuple(f"{name}-{i}" for i in range(8))
    return lambda now: words[int(rnd() * len(words))]


class _Session:
    """The generator's state of one open session (no table: only the live row ids)."""

    __slots__ = ("key", "next_row", "remaining", "row_ids", "seq", "session_id", "site", "topic")

    def __init__(self, session_id: str, site: int, topic: str, rows: int, updates: int) -> None:
        self.session_id = session_id
        self.key = session_id.encode()
        self.site = site
        self.topic = topic
        self.seq = 0
        self.row_ids = [f"r{i:06d}" for i in range(rows)]
        self.next_row = rows
        self.remaining = updates


class SessionSimulator:
    """The deterministic event stream: ``next_event`` picks a random open session and emits its next event.

    Updates change a random non-empty subset of columns of a live row; with probability ``delete_ratio``
    a row is deleted instead, and with the same probability a new row is inserted, so tables keep their
    size on average.
    """

    def __init__(self, options: ProducerOptions, run_id: str) -> None:
        self._options = options
        self._run_id = run_id
        self._rng = random.Random(options.seed)
        self._makers = [(name, _value_maker(name, type_, self._rng.random)) for name, type_ in options.schema]
        self._all_columns = (1 << len(self._makers)) - 1
        self._counter = 0
        topics = options.topics
        self._open = [self._new_session(site, topics[site])
                      for _ in range(options.sessions_per_site) for site in range(options.sites)]

    def _new_session(self, site: int, topic: str) -> _Session:
        session_id = f"s{site}-{self._run_id}-{self._counter:06d}"
        self._counter += 1
        return _Session(session_id, site, topic, self._options.rows_per_snapshot,
                        self._options.updates_per_session)

    def _values(self, mask: int, now: datetime) -> dict[str, Value]:
        """Random values of the columns whose bit is set in ``mask``."""
        return {name: make(now) for bit, (name, make) in enumerate(self._makers) if mask >> bit & 1}

    def next_event(self, now: datetime) -> Outgoing:
        """(topic, key, event) of the next message."""
        return self._advance(int(self._rng.random() * len(self._open)), now)

    def restart_site(self, site: int, now: datetime, request_id: str) -> tuple[list[Outgoing], list[Outgoing]]:
        """Answer a restart request: the ``end`` of every open session of ``site``, then the snapshots of
        as many new sessions (naming ``request_id``), to be sent in that order.

        A session whose snapshot was not generated yet has sent nothing: it is replaced without an ``end``.
        """
        ends: list[Outgoing] = []
        snapshots: list[Outgoing] = []
        for index, old in enumerate(self._open):
            if old.site != site:
                continue
            if old.seq > 0:
                ends.append((old.topic, old.key, EndEvent(old.session_id, old.seq, now)))
            new = self._open[index] = self._new_session(site, old.topic)
            new.seq = 1  # its snapshot goes out now
            snapshots.append((new.topic, new.key, self._snapshot(new, now, request_id)))
        return ends, snapshots

    def skip_row_event(self, site: int, now: datetime) -> Outgoing | None:
        """Generate the next update or delete of the first session of ``site`` that has one due, so that its
        ``seq`` moves on, for the caller not to send (a gap); None while no session of the site has one."""
        for index, session in enumerate(self._open):
            if session.site == site and session.seq > 0 and session.remaining > 0:
                return self._advance(index, now)
        return None

    def _advance(self, index: int, now: datetime) -> Outgoing:
        """(topic, key, event) of the next message of the open session at ``index``."""
        session = self._open[index]
        event: SessionEvent
        if session.seq == 0:
            event = self._snapshot(session, now)
        elif session.remaining == 0:
            event = EndEvent(session.session_id, session.seq, now)
            self._open[index] = self._new_session(session.site, session.topic)
        else:
            event = self._row_event(session, now)
        session.seq += 1
        return session.topic, session.key, event

    def _snapshot(self, session: _Session, now: datetime, restart_request: str | None = None) -> SnapshotEvent:
        """The snapshot opening ``session`` (``seq`` 0): every live row, every column."""
        rows = tuple(Row(row_id, self._values(self._all_columns, now)) for row_id in session.row_ids)
        return SnapshotEvent(session.session_id, 0, now, rows, restart_request)

    def _row_event(self, session: _Session, now: datetime) -> UpdateEvent | DeleteEvent:
        """The next row message of ``session``: a delete, an insert, or an update of some columns."""
        rnd = self._rng.random
        seq = session.seq
        session.remaining -= 1
        draw = rnd()
        ratio = self._options.delete_ratio
        live = session.row_ids
        if draw < ratio and live:
            position = int(rnd() * len(live))
            live[position], live[-1] = live[-1], live[position]
            return DeleteEvent(session.session_id, seq, now, live.pop())
        if draw < 2 * ratio or not live:
            live.append(f"r{session.next_row:06d}")
            session.next_row += 1
            return UpdateEvent(session.session_id, seq, now, live[-1], self._values(self._all_columns, now))
        mask = 1 + int(rnd() * self._all_columns)
        return UpdateEvent(session.session_id, seq, now, live[int(rnd() * len(live))], self._values(mask, now))


@dataclass
class ProducerReport:
    """What a run did; ``expected_tables`` (open sessions only) when ``track_expected`` was set."""

    run_id: str
    topics: dict[str, int]
    messages_sent: int
    sessions_started: int
    sessions_ended: int
    sessions_open: int
    delivery_errors: int
    undelivered: int
    elapsed_s: float
    rate: float
    stopped_by: StopReason
    error_samples: list[str] = field(default_factory=list)
    restarts: list[dict[str, Any]] = field(default_factory=list)  # site, request_id, sessions_ended/_opened, at
    restarts_skipped: list[dict[str, Any]] = field(default_factory=list)  # site, request_id, why
    gaps_injected: list[dict[str, Any]] = field(default_factory=list)  # topic, session_id, seq (never sent)
    expected_tables: dict[str, Table] | None = None

    def to_json(self) -> dict[str, Any]:
        document = asdict(self)
        if self.expected_tables is None:
            del document["expected_tables"]
        return document


class _Deliveries:
    """Failed deliveries per topic (librdkafka reports only errors: ``delivery.report.only.error``)."""

    def __init__(self) -> None:
        self.failed: dict[str, int] = {}
        self.samples: list[str] = []

    def __call__(self, error: KafkaError | None, message: Message) -> None:
        if error is None:
            return
        topic = message.topic() or "?"
        self.failed[topic] = self.failed.get(topic, 0) + 1
        if len(self.samples) < _ERROR_SAMPLES:
            self.samples.append(f"{topic}: {error}")

    @property
    def count(self) -> int:
        return sum(self.failed.values())


class _Publisher:
    """Sends events in order and keeps the run's counts, and the expected table of every open session when
    tracked: an event counts once the producer has it queued."""

    def __init__(self, producer: Producer, options: ProducerOptions, stop: threading.Event) -> None:
        self.producer = producer
        self.produced = dict.fromkeys(options.topics, 0)
        self.sent = self.sessions_started = self.sessions_ended = 0
        self.tables: dict[str, Table] | None = {} if options.track_expected else None
        self._pad_to = options.pad_to
        self._stop = stop

    def send(self, topic: str, key: bytes, event: SessionEvent) -> bool:
        """Queue one event; False if stopped while the local queue was full (the event is not sent)."""
        value = encode(event, self._pad_to)
        try:
            self.producer.produce(topic, value, key)
        except BufferError:
            if not _produce_when_queue_frees(self.producer, topic, value, key, self._stop):
                return False
        self.produced[topic] += 1
        self.sent += 1
        if event.type == "snapshot":
            self.sessions_started += 1
        elif event.type == "end":
            self.sessions_ended += 1
        if self.tables is not None:
            if event.type == "end":
                del self.tables[event.session_id]
            else:
                self.tables[event.session_id] = apply_event(self.tables.get(event.session_id, {}), event)
        return True


class _Restarts:
    """The control topic as this producer's sites see it: each command once per site, obeyed at its turn.

    Commands for topics this producer does not write are none of its business and pass unremarked.
    """

    def __init__(self, reader: CommandReader | None, options: ProducerOptions, say: Callable[[str], None]) -> None:
        self._reader = reader
        self._sites = {topic: site for site, topic in enumerate(options.topics)}
        self._ignored = frozenset(options.ignore_restarts)
        self._say = say
        self._seen: set[tuple[str, str]] = set()  # (request id, site topic)
        self._waiting: list[tuple[RestartSession, str]] = []
        self.acted: list[dict[str, Any]] = []
        self.skipped: list[dict[str, Any]] = []

    def act(self, now: datetime, simulator: SessionSimulator, publisher: _Publisher) -> None:
        """Read new commands and restart every site whose turn has come (until a send finds the run stopping)."""
        for command, topic in self._due(now):
            ends, snapshots = simulator.restart_site(self._sites[topic], now, command.request_id)
            if not all(publisher.send(*message) for message in [*ends, *snapshots]):
                return
            self.acted.append({"site": topic, "request_id": command.request_id, "sessions_ended": len(ends),
                               "sessions_opened": len(snapshots), "at": format_ts(now)})
            self._say(f"restart {command.request_id}: {topic} ended {len(ends)} session(s), opened "
                      f"{len(snapshots)} ({command.reason or 'no reason given'})")

    def _due(self, now: datetime) -> list[tuple[RestartSession, str]]:
        """(command, site topic) pairs to act on now; ignored and expired ones are recorded as skipped."""
        for command in self._reader.poll() if self._reader is not None else []:
            for topic in self._sites:
                if not command.targets(topic) or (command.request_id, topic) in self._seen:
                    continue
                self._seen.add((command.request_id, topic))
                if topic in self._ignored:
                    self._skip(command, topic, "ignored")
                else:
                    self._waiting.append((command, topic))
        due: list[tuple[RestartSession, str]] = []
        waiting: list[tuple[RestartSession, str]] = []
        for command, topic in self._waiting:
            if now >= command.deadline:
                self._skip(command, topic, "expired")
            else:
                (due if now >= command.not_before else waiting).append((command, topic))
        self._waiting = waiting
        return due

    def _skip(self, command: RestartSession, topic: str, why: str) -> None:
        self.skipped.append({"site": topic, "request_id": command.request_id, "why": why})
        self._say(f"restart {command.request_id} for {topic} skipped: {why}")


def _inject_gap(simulator: SessionSimulator, site: int, now: datetime) -> dict[str, Any] | None:
    """Generate one row message of a session of ``site`` and drop it; what was dropped, or None if no session
    of the site has a row message due yet."""
    dropped = simulator.skip_row_event(site, now)
    if dropped is None:
        return None
    topic, _, event = dropped
    return {"topic": topic, "session_id": event.session_id, "seq": event.seq}


def run_producer(
    settings: Settings,
    options: ProducerOptions,
    progress: Callable[[str], None] | None = None,
    stop: threading.Event | None = None,
) -> ProducerReport:
    """Publish simulated sessions until ``max_messages``, ``duration``, ``stop`` or a signal; then flush.

    In the main thread the first SIGINT (Ctrl-C) or SIGTERM stops after the current batch (at most
    1000 messages) and the queue is flushed; a second one interrupts the flush. With ``honour_restarts``
    the control topic is read (without blocking) before every batch.
    """
    say = progress or (lambda line: None)
    stop = stop or threading.Event()
    topics = options.topics
    if not re.fullmatch(settings.topic_pattern, topics[0]):
        say(f"warning: topic {topics[0]} does not match STREAMWARDEN_TOPIC_PATTERN "
            f"{settings.topic_pattern!r}; the stream will not read it")
    if options.create_topics:
        create_topics(settings.kafka_client_config(), topics, options.partitions)
    run_id = options.run_id or f"{options.seed}.{time.time_ns() // 1_000_000:x}"
    simulator = SessionSimulator(options, run_id)
    deliveries = _Deliveries()
    producer = Producer({**_PRODUCER_DEFAULTS, **settings.kafka_client_config(),
                         "delivery.report.only.error": True, "on_delivery": deliveries})
    publisher = _Publisher(producer, options, stop)
    reader = (CommandReader(settings, create_topic=options.create_topics,
                            on_skip=lambda skipped: say(f"control message skipped: {skipped}"))
              if options.honour_restarts else None)
    restarts = _Restarts(reader, options, say)
    gaps: list[dict[str, Any]] = []
    gap = options.inject_gap  # (site, after this many messages) until injected
    batch = _MAX_BATCH if options.rate == 0 else max(1, min(_MAX_BATCH, int(options.rate / 50)))
    tokens = burst = max(float(batch), options.rate / 10)  # token bucket: up to 0.1 s of burst
    sent_at_progress = 0
    started = last_refill = last_progress = time.monotonic()
    stopped_by: StopReason = "stop"
    with _stop_on_signals(stop) as signalled:
        try:
            say(f"producing to {', '.join(topics)} (run {run_id}, "
                f"{'unlimited' if options.rate == 0 else f'{options.rate:g} msg/s'}"
                f"{f', restart commands from {settings.control_topic}' if reader else ''})")
            while not stop.is_set():
                now_mono = time.monotonic()
                sent = publisher.sent
                if options.duration and now_mono - started >= options.duration:
                    stopped_by = "duration"
                    break
                if options.max_messages and sent >= options.max_messages:
                    stopped_by = "max_messages"
                    break
                if now_mono - last_progress >= options.progress_interval:
                    rate = (sent - sent_at_progress) / (now_mono - last_progress)
                    say(f"sent {sent:,} messages, {rate:,.0f} msg/s, "
                        f"{publisher.sessions_started - publisher.sessions_ended} sessions open, "
                        f"{len(restarts.acted)} restarts acted on, {deliveries.count} delivery errors")
                    last_progress, sent_at_progress = now_mono, sent
                now = datetime.now(UTC)
                restarts.act(now, simulator, publisher)
                if gap is not None and publisher.sent >= gap[1]:
                    dropped = _inject_gap(simulator, gap[0], now)
                    if dropped is not None:
                        gaps.append(dropped)
                        gap = (gap[0], publisher.sent + options.gap_every) if options.gap_every else None
                        say(f"gap injected: {dropped['topic']} session {dropped['session_id']} seq "
                            f"{dropped['seq']} not sent")
                size = _batch_size(batch, options.max_messages, publisher.sent, None if gap is None else gap[1])
                if options.rate:
                    tokens = min(tokens + (now_mono - last_refill) * options.rate, burst)
                    last_refill = now_mono
                    if tokens < size:
                        stop.wait(min((size - tokens) / options.rate, _CONTROL_POLL_S))
                        continue
                    tokens -= size
                for _ in range(size):
                    if not publisher.send(*simulator.next_event(now)):
                        break
                producer.poll(0)
        except KeyboardInterrupt:  # a second Ctrl-C before the loop saw the first
            signalled.set()
        finally:
            if reader is not None:
                reader.close()
        if signalled.is_set():
            stopped_by = "interrupt"
        undelivered = producer.flush(30.0)
        if undelivered:  # purged messages get failed delivery reports, so every topic's count stays exact
            producer.purge()
            producer.flush(5.0)
    elapsed = time.monotonic() - started
    delivered = {topic: count - deliveries.failed.get(topic, 0) for topic, count in publisher.produced.items()}
    total = sum(delivered.values())
    report = ProducerReport(
        run_id=run_id, topics=delivered, messages_sent=total, sessions_started=publisher.sessions_started,
        sessions_ended=publisher.sessions_ended, sessions_open=publisher.sessions_started - publisher.sessions_ended,
        delivery_errors=deliveries.count, undelivered=undelivered, elapsed_s=round(elapsed, 3),
        rate=round(total / elapsed, 1) if elapsed > 0 else 0.0, stopped_by=stopped_by,
        error_samples=deliveries.samples, restarts=restarts.acted, restarts_skipped=restarts.skipped,
        gaps_injected=gaps, expected_tables=publisher.tables,
    )
    say(f"done ({stopped_by}): sent {total:,} messages in {elapsed:.1f}s ({report.rate:,.0f} msg/s), "
        f"{deliveries.count} delivery errors, {undelivered} undelivered, {len(restarts.acted)} restarts acted on")
    return report


def _batch_size(batch: int, max_messages: int, sent: int, gap_due: int | None) -> int:
    """Messages in the next batch: ``batch``, cut at ``max_messages`` and at a gap that is still to come."""
    size = batch if not max_messages else min(batch, max_messages - sent)
    return min(size, gap_due - sent) if gap_due is not None and gap_due > sent else size


@contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[threading.Event]:
    """While inside, SIGINT/SIGTERM set ``stop`` (once; then the previous handlers are back).

    Yields an event that tells whether a signal arrived. Outside the main thread signals cannot be
    handled in Python, so nothing is installed there.
    """
    signalled = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield signalled
        return
    previous = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}

    def restore() -> None:
        for number, handler in previous.items():
            signal.signal(number, handler if handler is not None else signal.SIG_DFL)

    def handle(number: int, frame: FrameType | None) -> None:
        signalled.set()
        stop.set()
        restore()

    for number in previous:
        signal.signal(number, handle)
    try:
        yield signalled
    finally:
        restore()


def _produce_when_queue_frees(
    producer: Producer, topic: str, value: bytes, key: bytes, stop: threading.Event
) -> bool:
    """Retry a produce that hit a full local queue, serving delivery reports; False if stopped meanwhile."""
    while not stop.is_set():
        producer.poll(0.05)
        try:
            producer.produce(topic, value, key)
        except BufferError:
            continue
        return True
    return False


def _type(convert: Callable[[str], Any], check: Callable[[Any], bool], rule: str) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        if not check(value):
            raise argparse.ArgumentTypeError(f"{text!r}: {rule}")
        return value

    return parse


_POSITIVE = _type(int, lambda v: v > 0, "must be a whole number above zero")
_COUNT = _type(int, lambda v: v >= 0, "must be a whole number, zero or more")
_NON_NEGATIVE = _type(float, lambda v: v >= 0, "must be zero or more")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``produce`` command's options (defaults from :class:`ProducerOptions`)."""
    d = ProducerOptions()
    add = parser.add_argument
    add("--prefix", default=d.prefix, help="topics are <prefix>-<site> (default %(default)s)")
    add("--sites", type=_POSITIVE, default=d.sites, help="collection points (default %(default)s)")
    add("--partitions", type=_POSITIVE, default=d.partitions,
        help="partitions of the topics this command creates (default %(default)s)")
    add("--sessions-per-site", type=_POSITIVE, default=d.sessions_per_site,
        help="sessions open at once per site (default %(default)s)")
    add("--rows", type=_COUNT, default=d.rows_per_snapshot, dest="rows_per_snapshot",
        help="rows per snapshot (default %(default)s)")
    add("--updates-per-session", type=_COUNT, default=d.updates_per_session,
        help="row messages (updates and deletes) before a session ends (default %(default)s)")
    add("--delete-ratio", type=_type(float, lambda v: 0 <= v <= 0.5, "must be between 0 and 0.5"),
        default=d.delete_ratio, help="share of row messages that delete a row (default %(default)s)")
    add("--rate", type=_NON_NEGATIVE, default=d.rate, help="messages/s over all sites; 0 = unlimited")
    add("--duration", type=_NON_NEGATIVE, default=d.duration, help="seconds to run; 0 = until Ctrl-C")
    add("--max-messages", type=_COUNT, default=d.max_messages, help="stop after this many; 0 = unlimited")
    add("--seed", type=int, default=d.seed, help="random seed of the event stream (default %(default)s)")
    add("--pad-to", type=_COUNT, default=d.pad_to, metavar="BYTES",
        help="pad every value to at least BYTES (benchmarks)")
    add("--schema", type=_type(TableSchema.parse, lambda v: True, ""), default=d.schema, metavar="JSON",
        help='table schema, e.g. \'{"price": "double", "status": "string"}\' (default: the demo schema)')
    add("--no-create-topics", action="store_false", dest="create_topics", help="do not create missing topics")
    add("--track-expected", action="store_true",
        help="add the expected final table of every open session to the report")
    add("--progress-interval", type=_type(float, lambda v: v > 0, "must be above zero"),
        default=d.progress_interval, help="seconds between progress lines (default %(default)s)")
    add("--no-restarts", action="store_false", dest="honour_restarts",
        help="do not read restart_session commands from the control topic (STREAMWARDEN_CONTROL_TOPIC)")
    add("--ignore-restarts", action="append", default=None, metavar="SITE",
        help="a site topic that ignores restart_session commands (repeat it, or give a comma list; drills)")


def options_from_args(args: argparse.Namespace) -> ProducerOptions:
    """:class:`ProducerOptions` from parsed ``produce`` arguments."""
    return ProducerOptions(
        prefix=args.prefix, sites=args.sites, partitions=args.partitions,
        sessions_per_site=args.sessions_per_site, rows_per_snapshot=args.rows_per_snapshot,
        updates_per_session=args.updates_per_session, delete_ratio=args.delete_ratio, rate=args.rate,
        duration=args.duration, max_messages=args.max_messages, seed=args.seed, pad_to=args.pad_to,
        create_topics=args.create_topics, track_expected=args.track_expected, schema=args.schema,
        progress_interval=args.progress_interval, honour_restarts=args.honour_restarts,
        ignore_restarts=tuple(name.strip() for given in args.ignore_restarts or () for name in given.split(",")
                              if name.strip()),
    )
