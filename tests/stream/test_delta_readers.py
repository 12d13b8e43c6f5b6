"""Readers beside the live stream: every Delta version they see is whole, and three readers agree.

The real job (records pipeline, small batches) writes while a reader opens each new version of the table
and checks, per topic-partition, that the rows are exactly the offsets the version's log records as
committed (no part of a batch, no duplicate), and that no offset seen once goes missing later.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import duckdb
import polars as pl
import pytest
from deltalake import DeltaTable

from streamwarden.local.broker import LocalBroker
from streamwarden.tables.location import RECORDS, TableLocation
from streamwarden.tables.reading import dataset
from support import StreamProcess, produce_raw, stream_env
from version_reader import VersionReader

pytestmark = pytest.mark.slow

MESSAGES = 200_000
CAP = 20_000


def test_a_reader_beside_the_stream_sees_whole_batches_and_three_readers_agree(
    broker: LocalBroker, topic_factory: Callable[..., list[str]], tmp_path: Path
) -> None:
    topics = topic_factory(2, partitions=3)
    prefix = topics[0].rsplit("-", 1)[0]
    ends = produce_raw(broker.bootstrap_servers, topics, MESSAGES)
    job = StreamProcess(stream_env(tmp_path / "home", broker.bootstrap_servers, f"{prefix}-.*",
                                   max_offsets_per_trigger=str(CAP), trigger_interval="500ms"), tmp_path / "stream.log")
    location = TableLocation.of(job.settings, RECORDS)
    with VersionReader(location) as reader:
        job.start()
        try:
            job.wait_until(lambda: job.caught_up(ends), 600, "all offsets committed")
        finally:
            assert job.stop() == 0, job.log_tail()

    assert reader.problems == [], reader.problems[:10]
    assert len(reader.checked) >= MESSAGES // CAP, f"the reader saw only {len(reader.checked)} versions"
    assert reader.high == {(t, p): end for t, parts in ends.items() for p, end in parts.items()}

    root = str(location.path)
    by_deltalake = dataset(DeltaTable(root), location).to_table(columns=["topic", "partition", "offset"])
    by_polars = pl.scan_delta(root).select("topic", "partition", "offset").collect().to_arrow()
    with duckdb.connect() as con:
        con.register("records", dataset(DeltaTable(root), location))
        by_duckdb = con.execute('SELECT topic, "partition", "offset" FROM records').to_arrow_table()
    answers = [sorted(zip(*(t.column(c).to_pylist() for c in ("topic", "partition", "offset")), strict=True))
               for t in (by_deltalake, by_polars, by_duckdb)]
    assert answers[0] == answers[1] == answers[2]
    assert len(answers[0]) == MESSAGES == len(set(answers[0]))
