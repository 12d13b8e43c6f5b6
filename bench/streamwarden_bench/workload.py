"""The seeded snapshot/update workload, produced with the project's producer, and what every engine must output."""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace

from streamwarden.kafka.admin import fetch_high_watermarks, list_partitions, metadata_consumer
from streamwarden.local.producer import ProducerOptions, ProducerReport, run_producer
from streamwarden.settings import Settings, load_settings
from streamwarden.wire import Table

Ends = dict[str, dict[int, int]]
"""Log end offset per topic and partition (every workload starts at offset 0 on fresh topics)."""


@dataclass(frozen=True)
class WorkloadSpec:
    """What to produce; ``prefix`` names fresh topics ``<prefix>-<site>``."""

    prefix: str
    topics: int = 3
    partitions: int = 4
    sessions: int = 200  # open at once, over all topics
    rows: int = 100  # rows per snapshot
    updates_per_session: int = 200
    messages: int = 2_000_000
    seed: int = 1
    pad_to: int = 0

    def options(self, **changes: object) -> ProducerOptions:
        """Producer options of this workload (``changes`` override, e.g. a rate for the latency phase)."""
        base = ProducerOptions(
            prefix=self.prefix, sites=self.topics, partitions=self.partitions,
            sessions_per_site=max(1, self.sessions // self.topics), rows_per_snapshot=self.rows,
            updates_per_session=self.updates_per_session, max_messages=self.messages, seed=self.seed,
            pad_to=self.pad_to, track_expected=True, progress_interval=30.0,
        )
        return replace(base, **changes)  # type: ignore[arg-type]

    @property
    def pattern(self) -> str:
        return f"{self.prefix}-.*"


@dataclass
class Workload:
    """Produced data: where it lies and the tables it must rebuild to."""

    spec: WorkloadSpec
    bootstrap: str
    ends: Ends
    expected: dict[str, Table]
    produce_rate: float

    @property
    def messages(self) -> int:
        return sum(end for parts in self.ends.values() for end in parts.values())

    def settings(self) -> Settings:
        return load_settings(bootstrap_servers=self.bootstrap, topic_pattern=self.spec.pattern)


def produce(settings: Settings, options: ProducerOptions, stop: threading.Event | None = None) -> ProducerReport:
    """Run the project's producer; a delivery error makes the benchmark void."""
    report = run_producer(settings, options, stop=stop)
    if report.delivery_errors or report.undelivered:
        raise RuntimeError(f"producer lost messages: {report.error_samples}")
    return report


def log_ends(bootstrap: str, pattern: str) -> Ends:
    """The log end of every partition, from a fetch (Tansu's ListOffsets(latest) may lag)."""
    consumer = metadata_consumer({"bootstrap.servers": bootstrap})
    try:
        marks = fetch_high_watermarks(consumer, list_partitions(consumer, pattern))
    finally:
        consumer.close()
    ends: Ends = {}
    for tp, (_, high) in marks.items():
        ends.setdefault(tp.topic, {})[tp.partition] = high
    return ends


def generate(spec: WorkloadSpec, bootstrap: str) -> Workload:
    """Produce the workload on fresh topics and record the expected final tables."""
    settings = load_settings(bootstrap_servers=bootstrap, topic_pattern=spec.pattern)
    report = produce(settings, spec.options())
    assert report.expected_tables is not None
    return Workload(spec, bootstrap, log_ends(bootstrap, spec.pattern), report.expected_tables, report.rate)
