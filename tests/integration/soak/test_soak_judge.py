"""The soak's offset verdict over real Delta tables committed by the real sink: exact when every offset is in one
table once, and each kind of damage counted (a lost range, a file committed twice, a partition the broker did not
list)."""

from __future__ import annotations

from pathlib import Path

from streamwarden_soak.judge import judge_offsets

from fixtures.stream_output import add_copy, commit_batch, committed_paths, remove_file, settings_for
from streamwarden.tables.location import QUARANTINE, SESSION_ROWS

TOPIC = "sites-0"


def _output(tmp_path: Path) -> Path:
    settings = settings_for(tmp_path)
    commit_batch(settings, {TOPIC: {0: (0, 100), 1: (0, 40)}}, 0)
    commit_batch(settings, {TOPIC: {0: (100, 150)}}, 1)
    return settings.root("output")


def test_every_offset_in_exactly_one_table_is_exact(tmp_path: Path) -> None:
    verdict = judge_offsets(_output(tmp_path), {TOPIC: {"0": 150, "1": 40}})
    assert (verdict.partitions, verdict.expected, verdict.found) == (2, 190, 190)
    assert (verdict.lost, verdict.duplicated, verdict.in_both_tables) == (0, 0, 0)
    assert verdict.table_problems == [] and verdict.examples == []


def test_offsets_beyond_what_was_committed_are_lost(tmp_path: Path) -> None:
    verdict = judge_offsets(_output(tmp_path), {TOPIC: {"0": 160, "1": 40}, "sites-1": {"0": 7}})
    assert verdict.lost == 10 + 7
    assert any("150 of its 160" in line for line in verdict.examples)
    assert any("none of its 7" in line for line in verdict.examples)


def test_a_file_committed_twice_counts_its_rows_as_duplicated(tmp_path: Path) -> None:
    output = _output(tmp_path)
    settings = settings_for(tmp_path)
    add_copy(settings, QUARANTINE, committed_paths(settings, QUARANTINE)[0])
    verdict = judge_offsets(output, {TOPIC: {"0": 150, "1": 40}})
    assert verdict.duplicated > 0 and verdict.lost == 0
    assert any(line.startswith("quarantine:") and "more than once" in line for line in verdict.examples)


def test_a_file_dropped_from_the_log_loses_its_offsets(tmp_path: Path) -> None:
    output = _output(tmp_path)
    settings = settings_for(tmp_path)
    remove_file(settings, SESSION_ROWS, committed_paths(settings, SESSION_ROWS)[0])
    verdict = judge_offsets(output, {TOPIC: {"0": 150, "1": 40}})
    assert verdict.lost > 0 and verdict.duplicated == 0
