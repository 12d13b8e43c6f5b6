"""The soak's traffic: the steady producer and its bursts (each a ``streamwarden`` producer in a process of its own,
its reference of every open session written to a file at its end), and malformed records sent from here.

``python -m streamwarden_soak.traffic --report FILE [producer options]`` is one producer: it runs
:func:`streamwarden.local.producer.run_producer` with ``track_expected`` until SIGINT/SIGTERM or its duration,
then writes its report (what it sent, the sessions it gapped, the restarts it obeyed or ignored, the final
table of every session still open) to ``FILE``.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from streamwarden.atomic import write_json_atomic
from streamwarden.local.producer import ProducerOptions, run_producer
from streamwarden.settings import Settings, load_settings

SITES = 6
"""Collection points of the soak: one ignores restart commands, one leaves a row message unsent now and then."""
IGNORING_SITE = 4
GAPPING_SITE = 5
GAP_EVERY = 40_000
"""Messages between two injected gaps (about five minutes at the soak's steady rate)."""
MALFORMED_FLUSH_S = 150.0
"""Longer than the longest broker pause a fault makes: a burst sent during one lands when it ends."""


@dataclass(frozen=True)
class TrafficShape:
    rate: float
    seed: int
    sites: int = SITES

    def topics(self, prefix: str = "sites") -> list[str]:
        return [f"{prefix}-{site}" for site in range(self.sites)]


def producer_command(report: Path, shape: TrafficShape, seed: int, rate: float, *, duration: float = 0,
                     gaps: bool) -> list[str]:
    command = [sys.executable, "-m", "streamwarden_soak.traffic", "--report", str(report), "--rate", f"{rate:g}",
               "--seed", str(seed), "--sites", str(shape.sites), "--duration", f"{duration:g}"]
    return [*command, "--gaps"] if gaps else command


def start_producer(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def stop_producer(process: subprocess.Popen[bytes], timeout: float = 60) -> int:
    """SIGINT (the producer flushes and writes its report), SIGKILL past ``timeout``."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


@dataclass(frozen=True)
class MalformedSent:
    topic: str
    offsets: list[tuple[int, int]]  # (partition, offset) of each record the broker took
    errors: list[str]


def send_malformed(settings: Settings, topic: str, records: int, tag: str) -> MalformedSent:
    """``records`` undecodable values (not JSON) into ``topic``; where each landed."""
    landed: list[tuple[int, int]] = []
    errors: list[str] = []

    def delivered(error: KafkaError | None, message: Message) -> None:
        if error is not None:
            errors.append(str(error))
        else:
            landed.append((int(message.partition() or 0), int(message.offset() or 0)))

    producer = Producer({**settings.kafka_client_config(), "on_delivery": delivered})
    for index in range(records):
        producer.produce(topic, b"{malformed soak record " + f"{tag}.{index}".encode(), f"malformed-{tag}".encode())
    left = producer.flush(MALFORMED_FLUSH_S)
    if left:
        errors.append(f"{left} record(s) not delivered within {MALFORMED_FLUSH_S:.0f} s")
    return MalformedSent(topic, sorted(landed), errors)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m streamwarden_soak.traffic", description=__doc__)
    parser.add_argument("--report", type=Path, required=True)
    parser.add_argument("--rate", type=float, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--sites", type=int, default=SITES)
    parser.add_argument("--duration", type=float, default=0)
    parser.add_argument("--gaps", action="store_true", help="one site leaves a row message unsent now and then")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    options = ProducerOptions(
        sites=args.sites, rate=args.rate, seed=args.seed, duration=args.duration, track_expected=True,
        ignore_restarts=(f"sites-{IGNORING_SITE}",), progress_interval=30,
        inject_gap=(GAPPING_SITE, GAP_EVERY // 4) if args.gaps else None, gap_every=GAP_EVERY if args.gaps else 0)
    report = run_producer(load_settings(), options, progress=lambda line: print(line, flush=True))
    document: dict[str, Any] = report.to_json()
    write_json_atomic(args.report, document)
    return 0


if __name__ == "__main__":
    sys.exit(main())
