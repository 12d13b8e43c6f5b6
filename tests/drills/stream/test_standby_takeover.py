"""The warm standby takes over from a killed stream, and never writes beside it.

A standby (``streamwarden stream --standby``) waits with its Spark session started; while a producer keeps
writing (so a batch always follows), the stream is killed -9 at random moments of its batches, the standby
takes the lease and commits the next batch, a new standby is started beside it, and so on. A stop on purpose
stops the standby first: nothing takes over. At rest every offset is in the table exactly once (read through
the Delta log). The times are printed; ``make bench-standby`` measures them over more kills.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from fixtures.stream_process import expected_ranges, produce_raw, settings_of, stream_env
from streamwarden.local.broker import LocalBroker
from streamwarden.tables.location import RECORDS
from streamwarden.testing.exactly_once import verify_table
from streamwarden.testing.replay import caught_up
from streamwarden.testing.takeover import StreamProcesses, held_by, kill_and_heal, wait_for
from streamwarden.warden.stop import StopMethod, stop_stream

pytestmark = pytest.mark.slow

KILLS = 3
CHUNK = 2_000
"""Messages the producer writes each second meanwhile (under the 8,000 a batch takes at most)."""


def test_the_standby_takes_over_each_kill_and_stands_down_on_a_stop_exactly_once(
        broker: LocalBroker, topic_factory: Callable[..., list[str]], tmp_path: Path) -> None:
    topics = topic_factory(2, partitions=2)
    stop = threading.Event()
    ends = [produce_raw(broker.bootstrap_servers, topics, 40_000)]

    def keep_producing() -> None:
        while not stop.wait(1.0):
            ends.append(produce_raw(broker.bootstrap_servers, topics, CHUNK))

    producer = threading.Thread(target=keep_producing, daemon=True)
    producer.start()
    env = stream_env(tmp_path / "home", broker.bootstrap_servers, f"{topics[0].rsplit('-', 1)[0]}-.*",
                     max_offsets_per_trigger="8000")
    settings = settings_of(env)
    processes = StreamProcesses(env, tmp_path / "streams.log")
    try:
        processes.start()
        wait_for(lambda: held_by(settings.lease_path) is not None and
                 bool(list((settings.checkpoint_location / "commits").glob("[0-9]*"))), 240,
                 "the first batch committed", interval=0.2)
        rng = random.Random(20261129)
        takeovers = [kill_and_heal(settings, processes, rng, standby=True) for _ in range(KILLS)]
        print("\nkill -9 -> lease taken / next batch committed by the standby: " +
              ", ".join(f"{t.lease_s:.2f}s / {t.commit_s:.1f}s" for t in takeovers))
        assert all(t.next_pid != t.killed_pid for t in takeovers)

        # a stop on purpose: the standby is stopped first, and does not take over from the drained stream
        standby = processes.start(standby=True)
        wait_for(lambda: (h := held_by(settings.standby_lease_path)) is not None and h.pgid == standby.pid, 240,
                 "a standby to wait", interval=0.2)
        outcome = stop_stream(settings, drain_timeout=120, term_timeout=20)
        assert outcome.method is StopMethod.DRAINED
        assert standby.poll() is not None, "the standby outlived the stop"
        assert held_by(settings.lease_path) is None and held_by(settings.standby_lease_path) is None

        stop.set()
        producer.join(60)
        last = processes.start()
        wait_for(lambda: caught_up(settings.checkpoint_location, ends[-1]), 600, "every offset committed",
                 interval=0.5)
        settings.run_paths.stop_marker.touch()
        assert last.wait(120) == 0
    finally:
        stop.set()
        processes.kill_all()
    report = verify_table(settings.root("output") / RECORDS, expected_ranges(ends[-1]))
    assert report.ok, report.summary()
    assert report.rows == sum(end for parts in ends[-1].values() for end in parts.values())
