"""The rolling hour of batch durations behind the heartbeat's ``batch_p99_ms``."""

from __future__ import annotations

import json
from pathlib import Path

from streamwarden.runfiles.checkpoint import INITIAL_OFFSETS_FILE
from streamwarden.stream.batch_durations import BatchDurations
from streamwarden.stream.listener import batch_records


def test_the_first_batch_is_left_out_and_the_p99_is_the_nearest_rank() -> None:
    durations = BatchDurations()
    durations.add(at=0, ms=60_000)  # the warm-up batch
    assert durations.p99_ms(now=1) is None
    for i in range(1, 201):
        durations.add(at=i, ms=100 if i % 50 else 5_000)  # 4 slow batches in 200
    assert durations.p99_ms(now=201) == 5_000
    for i in range(201, 401):
        durations.add(at=i, ms=100)
    assert durations.p99_ms(now=401) == 100, "2 slow batches in 400 are below the 99th percentile"


def test_batches_older_than_the_window_drop_out() -> None:
    durations = BatchDurations(window_s=60)
    for at, ms in ((0, 1), (10, 9_000), (50, 200)):
        durations.add(at=at, ms=ms)
    assert durations.p99_ms(now=60) == 9_000
    assert durations.p99_ms(now=71) == 200
    assert durations.p99_ms(now=111) is None


def test_a_batch_counts_the_offsets_it_planned_not_the_rows_its_source_emitted(tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / INITIAL_OFFSETS_FILE).write_text(json.dumps({"a": {"0": 10, "1": 5}}))
    for batch, ends in enumerate([{"a": {"0": 25, "1": 5}}, {"a": {"0": 30, "1": 9}, "b": {"0": 0}},
                                  {"a": {"0": 30, "1": 9}, "b": {"0": 7}}]):
        (checkpoint / "offsets" / str(batch)).write_text(f"v1\n{{}}\n{json.dumps(ends)}\n")
    assert [batch_records(checkpoint, batch) for batch in range(3)] == [15, 5 + 4, 7]  # b appears, then is read
    assert batch_records(checkpoint, 3) is None  # not in the log
