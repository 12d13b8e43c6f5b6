"""``python -m streamwarden_bench.watermark_cost``: the source's watermark query per trigger as the log grows.

The embedded broker (Tansu, in memory) answers a fetch below a partition's end at a cost that grows with the
record batches it holds while records are being produced. This measures what the stream's driver pays per
trigger for its watermarks (:func:`streamwarden.kafka.admin.watermarks_within` with the ends it knew and the
positions of a caught-up reader, as the source calls it) while the demo producer writes at its rate, at a log
of ``--base`` messages and at ten times that, how many partitions were fetched, and how many asked got only a
lower bound. Writes JSON and Markdown to ``--results``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import psutil

from streamwarden.kafka.admin import TopicPartitionId, list_partitions, metadata_consumer, watermarks_within
from streamwarden.local.broker import LocalBroker
from streamwarden.settings import Settings

PATTERN = "sites-.*"


@dataclass(frozen=True)
class Step:
    """The query's cost at one length of the log."""

    log_messages: int
    triggers: int
    p50_s: float
    p95_s: float
    max_s: float
    lower_bound_share: float  # of the partitions fetched, those left with ListOffsets' lower bound (no answer)
    fetched_share: float  # of the partitions' answers, those fetched (the others were beyond the reader)
    broker_rss_mib: float


def _produce(home: Path, bootstrap: str, rate: float, max_messages: int = 0) -> subprocess.Popen[bytes]:
    env = {**os.environ, "STREAMWARDEN_BOOTSTRAP_SERVERS": bootstrap, "STREAMWARDEN_HOME": str(home)}
    command = [sys.executable, "-m", "streamwarden", "produce", "--rate", f"{rate:g}"]
    if max_messages:
        command += ["--max-messages", str(max_messages)]
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _log_length(bootstrap: str) -> int:
    consumer = metadata_consumer({"bootstrap.servers": bootstrap})
    try:
        marks = watermarks_within(consumer, list_partitions(consumer, PATTERN), 30.0)
        return sum(m.high for m in marks.values())
    finally:
        consumer.close()


def measure(bootstrap: str, home: Path, args: argparse.Namespace, broker_pid: int) -> Step:
    """``args.triggers`` queries ``args.interval`` apart by one long-lived consumer, as the source's driver makes them,
    while the demo producer writes at ``args.rate``."""
    rate, triggers, interval, budget = args.rate, args.triggers, args.interval, args.budget
    producer = _produce(home, bootstrap, rate)
    consumer = metadata_consumer({"bootstrap.servers": bootstrap})
    known: dict[TopicPartitionId, int] = {}
    reader_at: dict[TopicPartitionId, int] = {}  # a reader that read all it was planned at the previous trigger
    times: list[float] = []
    inexact = asked = answers = 0
    try:
        time.sleep(interval)
        for _ in range(triggers):
            began = time.monotonic()
            marks = watermarks_within(consumer, list_partitions(consumer, PATTERN, budget), budget, known, reader_at)
            times.append(time.monotonic() - began)
            answers += len(marks)
            asked += sum(m.asked for m in marks.values())
            inexact += sum(m.asked and not m.exact for m in marks.values())
            reader_at = {tp: m.high for tp, m in marks.items()}
            time.sleep(max(0.0, interval - times[-1]))
    finally:
        consumer.close()
        producer.terminate()
        producer.wait()
    ordered = sorted(times)
    return Step(_log_length(bootstrap), triggers, statistics.median(ordered),
                ordered[int(0.95 * (len(ordered) - 1))], ordered[-1], inexact / max(asked, 1), asked / max(answers, 1),
                psutil.Process(broker_pid).memory_info().rss / 2**20)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="streamwarden_bench.watermark_cost", description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=int, default=1_800_000,
                        help="log length of the first step (default: 2.5 hours of `make run`'s demo at 200 msg/s; "
                             "ten times that is a day of it)")
    parser.add_argument("--factor", type=int, default=10, help="the second step's log is this many times longer")
    parser.add_argument("--rate", type=float, default=2000.0,
                        help="the demo producer's rate while measuring (default: ten times `make run`'s, a broker "
                             "busy writing)")
    parser.add_argument("--triggers", type=int, default=40)
    parser.add_argument("--interval", type=float, default=Settings.model_fields["trigger_interval"].default)
    parser.add_argument("--budget", type=float, default=Settings.model_fields["watermark_timeout"].default)
    parser.add_argument("--results", type=Path, default=Path("bench/results/watermarks"))
    args = parser.parse_args(argv)
    steps: list[Step] = []
    with tempfile.TemporaryDirectory(prefix="sw-watermarks-") as tmp, LocalBroker() as broker:
        assert broker.process is not None
        home = Path(tmp)
        for target in (args.base, args.base * args.factor):
            filler = _produce(home, broker.bootstrap_servers, 0, max(0, target - _log_length(broker.bootstrap_servers)))
            filler.wait()
            steps.append(measure(broker.bootstrap_servers, home, args, broker.process.pid))
            print(json.dumps(asdict(steps[-1])), flush=True)
    args.results.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H%M%SZ")
    document = {"when": stamp, "rate": args.rate, "interval_s": args.interval, "budget_s": args.budget,
                "steps": [asdict(step) for step in steps],
                "p50_ratio": steps[-1].p50_s / steps[0].p50_s, "max_ratio": steps[-1].max_s / steps[0].max_s}
    (args.results / f"{stamp}.json").write_text(json.dumps(document, indent=2) + "\n")
    lines = [f"# The source's watermark query per trigger ({stamp})", "",
             f"Demo producer at {args.rate:g} msg/s while measuring; a trigger every {args.interval:g} s; "
             f"budget {args.budget:g} s.", "",
             "| log (messages) | triggers | p50 s | p95 s | max s | fetched | unanswered of those | broker RSS MiB |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    lines += [f"| {s.log_messages:,} | {s.triggers} | {s.p50_s:.3f} | {s.p95_s:.3f} | {s.max_s:.3f} | "
              f"{s.fetched_share:.1%} | {s.lower_bound_share:.1%} | {s.broker_rss_mib:,.0f} |" for s in steps]
    lines += ["", f"p50 at {args.factor}x the log: {document['p50_ratio']:.2f}x; max: {document['max_ratio']:.2f}x."]
    (args.results / f"{stamp}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
