"""The control topic on the broker: creating it, publishing commands to it, and reading them as a site does.

The topic has one partition and the key of a message is its command's site, so every reader sees every
command in the order it was published. Publishing is all or nothing for the caller: every command is
delivered, or :class:`~streamwarden.failures.EnvironmentFailure` says how many were not. A reader starts
from the beginning of the topic (retention bounds how far back that is) and never commits offsets; a
message it cannot decode, or a command it does not know, is skipped and reported, never obeyed.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType

from confluent_kafka import OFFSET_BEGINNING, KafkaError, Message, Producer, TopicPartition

from streamwarden.control.commands import (
    ControlFormatError,
    RestartSession,
    UnsupportedCommandError,
    decode_command,
    encode_command,
)
from streamwarden.failures import EnvironmentFailure
from streamwarden.kafka.admin import DEFAULT_RETENTION_MS, create_topics, make_consumer
from streamwarden.settings import Settings

log = logging.getLogger("streamwarden.control")

CONTROL_PARTITIONS = 1
"""The control topic has one partition (0), so every command keeps its place in one order."""
_POLL_BATCH = 500
_PURGED = (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT)


def ensure_control_topic(settings: Settings) -> None:
    """Create ``settings.control_topic`` (one partition, 7 days' retention) unless the broker has it."""
    create_topics(settings.kafka_client_config(), [settings.control_topic], CONTROL_PARTITIONS,
                  retention_ms=DEFAULT_RETENTION_MS)


def publish_commands(settings: Settings, commands: Sequence[RestartSession], timeout: float = 30.0) -> None:
    """Publish ``commands`` on the control topic (key: the site) and wait until each one is delivered.

    The topic must exist (:func:`ensure_control_topic`). The producer is idempotent, so a retry neither
    duplicates nor reorders a command. A command not delivered within ``timeout`` seconds (or refused by
    the broker) raises ``EnvironmentFailure`` naming the topic, how many failed and a sample error.
    """
    if not commands:
        return
    topic = settings.control_topic
    errors: list[str] = []
    delivered = 0

    def report(error: KafkaError | None, message: Message) -> None:
        nonlocal delivered
        if error is None:
            delivered += 1
        elif error.code() not in _PURGED:  # purged below: the sample says "not delivered within"
            errors.append(str(error))

    producer = Producer({"message.timeout.ms": str(int(timeout * 1000)), **settings.kafka_client_config(),
                         "enable.idempotence": "true", "on_delivery": report})
    for command in commands:
        producer.produce(topic, encode_command(command), command.key)
    if producer.flush(timeout):  # purged messages get failed delivery reports
        producer.purge()
        producer.flush(1.0)
    failed = len(commands) - delivered
    if failed:
        sample = errors[0] if errors else f"not delivered within {timeout:g}s"
        raise EnvironmentFailure(f"{failed} of {len(commands)} command(s) not delivered to the control topic "
                                 f"{topic} at {settings.bootstrap_servers}: {sample}", topic=topic)


@dataclass(frozen=True)
class SkippedMessage:
    """A control message a reader did not obey: where it is and why."""

    topic: str
    partition: int
    offset: int
    reason: str

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}: {self.reason}"


def _log_skipped(skipped: SkippedMessage) -> None:
    log.warning("control message skipped: %s", skipped)


class CommandReader:
    """A collection point's view of the control topic: every command from the beginning, without blocking.

    Use it as a context manager. :meth:`poll` returns the commands fetched since the previous call (none
    while the first fetch is under way). A message that breaks the contract, or a command of a type or
    version this reader does not know, goes to ``on_skip`` (default: a warning in the log) and is not
    returned. With ``create_topic`` the topic is created when missing; without it, a missing topic reads
    as empty until someone creates it.
    """

    def __init__(self, settings: Settings, *, create_topic: bool = True,
                 on_skip: Callable[[SkippedMessage], None] = _log_skipped) -> None:
        self.topic = settings.control_topic
        self._on_skip = on_skip
        if create_topic:
            ensure_control_topic(settings)
        self._consumer = make_consumer({
            **settings.kafka_client_config(),
            "group.id": f"streamwarden-control-{uuid.uuid4().hex[:12]}",  # required, though nothing joins
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",  # also when retention removes offsets under the reader
            "fetch.wait.max.ms": 100,
        })
        self._consumer.assign([TopicPartition(self.topic, 0, OFFSET_BEGINNING)])
        self._closed = False

    def poll(self) -> list[RestartSession]:
        """The commands fetched since the last call, in topic order; returns at once."""
        commands: list[RestartSession] = []
        for message in self._consumer.consume(num_messages=_POLL_BATCH, timeout=0):
            error = message.error()
            if error is not None:
                self._broker_error(error)
                continue
            try:
                commands.append(decode_command(message.key(), message.value()))
            except ControlFormatError as exc:
                kind = "unsupported" if isinstance(exc, UnsupportedCommandError) else "malformed"
                self._on_skip(SkippedMessage(self.topic, int(message.partition() or 0), int(message.offset() or 0),
                                             f"{kind}: {exc}"))
        return commands

    def _broker_error(self, error: KafkaError) -> None:
        """A fatal client error stops the reader; others (the broker away, the topic not there yet) are
        retried by the client and only logged."""
        if error.fatal():
            raise EnvironmentFailure(f"cannot read the control topic {self.topic}: {error}", topic=self.topic)
        log.warning("reading the control topic %s: %s", self.topic, error)

    def close(self) -> None:
        """Leave the topic (no offsets are committed); later calls do nothing."""
        if not self._closed:
            self._closed = True
            self._consumer.close()

    def __enter__(self) -> CommandReader:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()
