"""Restoring a table with the offsets it claims, on tables the real DeltaSink committed (no Spark)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc  # type: ignore[import-untyped, unused-ignore]
import pytest

from fixtures.stream_output import commit_batch, settings_for
from streamwarden.failures import ConfigError
from streamwarden.tables.committed import Runs, rewind
from streamwarden.tables.location import SESSION_ROWS, TableLocation
from streamwarden.tables.restore import restore_table
from streamwarden.testing.replay import read_table

TOPIC = "sites-0"


def batch(start: int, end: int) -> dict[str, dict[int, tuple[int, int]]]:
    return {TOPIC: {0: (start, end), 1: (start, end)}}


def offsets(location: TableLocation) -> list[tuple[int, int]]:
    rows = read_table(Path(location.uri), ["partition", "offset"])
    pairs = sorted(set(zip(rows.column("partition").to_pylist(), rows.column("offset").to_pylist(), strict=True)))
    assert len(pairs) * 3 == rows.num_rows, "every offset's rows once (three per offset)"
    return pairs


def test_a_restored_table_claims_what_it_held_then_and_a_replay_writes_the_undone_offsets_again(
        tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    location = TableLocation.of(settings, SESSION_ROWS)
    commit_batch(settings, batch(0, 100), 0)
    target = commit_batch(settings, batch(100, 200), 1)[SESSION_ROWS]
    commit_batch(settings, batch(200, 300), 2)
    location.open().optimize.compact()  # a compaction after the target moves no claim

    restored = restore_table(location, target, "recovery-1")

    assert restored.undone == {TOPIC: {0: [(200, 300)], 1: [(200, 300)]}} and not restored.already
    assert Runs.read(location.open(), [(TOPIC, 0), (TOPIC, 1)]).index() == {TOPIC: {0: [(0, 200)], 1: [(0, 200)]}}
    assert offsets(location) == [(p, o) for p in (0, 1) for o in range(200) if o % 5]  # every fifth: quarantine
    again = restore_table(location, target, "recovery-1")  # a re-run after a kill -9: done already
    assert (again.version, again.undone, again.already) == (restored.version, restored.undone, True)
    assert location.open().version() == restored.version

    commit_batch(settings, batch(200, 300), 3)  # the replay is written, not skipped as committed
    assert offsets(location) == [(p, o) for p in (0, 1) for o in range(300) if o % 5]


def test_a_run_opened_after_the_target_is_emptied_and_the_counter_only_grows() -> None:
    now = Runs({("t", 0): [(0, 300), (500, 600)]}, {("t", 0): 7})
    then = Runs({("t", 0): [(0, 200)]}, {("t", 0): 3})
    assert [(t.app_id, t.version) for t in rewind(now, then)] == [
        ("streamwarden:t:0:0:start", 0), ("streamwarden:t:0:0:end", 200), ("streamwarden:t:0:1:start", 500),
        ("streamwarden:t:0:1:end", 500), ("streamwarden:t:0:commits", 8)]
    assert rewind(then, then) == []


def test_a_version_whose_later_commits_left_the_log_is_refused(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    location = TableLocation.of(settings, SESSION_ROWS)
    for batch_id in range(3):
        commit_batch(settings, batch(batch_id * 100, batch_id * 100 + 100), batch_id)
    table = location.open()
    table.create_checkpoint()
    for log in (Path(location.uri) / "_delta_log").glob("0000000000000000000[12].json"):
        log.unlink()  # what log clean-up does to commits older than the retention
    with pytest.raises(ConfigError, match="no longer all in its log"):
        restore_table(location, 1, "recovery-2")
    assert pc.max(read_table(Path(location.uri), ["offset"]).column("offset")).as_py() == 299, "nothing changed"
