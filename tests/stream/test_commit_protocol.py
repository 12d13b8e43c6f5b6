"""The exactly-once commit protocol on a real filesystem with real Parquet files (no Spark).

Staged files are written the way ``df.write.partitionBy("topic", "date", "hour").parquet(dir)`` leaves
them: hive folders without the partition columns in the file, ``part-NNNNN-<uuid>.c000.zstd.parquet``
names, plus ``_SUCCESS`` and hidden ``.crc`` files. Crashes are real ``SIGKILL``s of a child process.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.parquet as pq  # type: ignore[import-untyped, unused-ignore]
import pytest

from streamwarden.failures import FailureClass, classify
from streamwarden.stream.sink import commit_protocol
from streamwarden.stream.sink.commit_protocol import (
    INTENT_FILE,
    CommitProtocol,
    CommitProtocolError,
    CommittedFileMissingError,
    Manifest,
    ManifestCorruptError,
    OverlappingCommitError,
    StagingMismatchError,
)
from streamwarden.stream.sink.ranges import (
    IntervalIndex,
    OffsetRanges,
    batch_key,
    canonical_ranges,
    committed_within,
    exclusion_predicate,
    index_from_json,
    merge_intervals,
    overlap,
    subtract_interval,
    uncommitted,
    union,
)
from streamwarden.testing.faults import CHAOS_ENV
from streamwarden.validation.exactly_once import verify_table

TABLE = "events"
RANGES: OffsetRanges = {"sites-a": {0: (0, 120), 1: (10, 60)}, "sites-b": {0: (0, 30)}}


# -- helpers -------------------------------------------------------------------------------------------------
def stage(folder: Path, ranges: OffsetRanges | IntervalIndex, files_per_hour: int = 2) -> int:
    """Write rows for every offset of ``ranges`` as Spark would; returns the number of rows."""
    rows = 0
    for topic, parts in ranges.items():
        for partition, spans in parts.items():
            for start, end in spans if isinstance(spans, list) else [spans]:
                rows += _stage_offsets(folder, topic, partition, list(range(start, end)), files_per_hour)
    (folder / "_SUCCESS").parent.mkdir(parents=True, exist_ok=True)
    (folder / "_SUCCESS").touch()
    return rows


def _stage_offsets(folder: Path, topic: str, partition: int, offsets: list[int], files_per_hour: int) -> int:
    by_hour: dict[int, list[int]] = {}
    for offset in offsets:
        by_hour.setdefault(offset // 50 % 24, []).append(offset)
    for hour, hour_offsets in by_hour.items():
        hive = folder / f"topic={topic}" / "date=2026-11-21" / f"hour={hour:02d}"
        hive.mkdir(parents=True, exist_ok=True)
        write_id = uuid.uuid4()
        for task in range(files_per_hour):
            chunk = hour_offsets[task::files_per_hour]
            table = pa.table({"partition": pa.array([partition] * len(chunk), pa.int32()),
                              "offset": pa.array(chunk, pa.int64()),
                              "value": pa.array([f"v{o}" for o in chunk])})
            name = f"part-{partition:03d}{task:02d}-{write_id}.c000.zstd.parquet"
            pq.write_table(table, hive / name, compression="zstd")
            (hive / f".{name}.crc").write_bytes(b"crc")
    return len(offsets)


def fresh(root: Path) -> CommitProtocol:
    protocol = CommitProtocol(root, TABLE)
    protocol.recover()
    return protocol


def commit_batch(protocol: CommitProtocol, ranges: OffsetRanges, batch_id: int = 0) -> Manifest:
    plan = protocol.plan(ranges, batch_id)
    stage(plan.staging_dir, plan.to_commit)
    return protocol.commit(plan)


def as_index(ranges: OffsetRanges) -> IntervalIndex:
    return {t: {p: [i] for p, i in parts.items()} for t, parts in ranges.items()}


def final_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root / TABLE)) for p in (root / TABLE).rglob("*.parquet"))


def assert_exactly(root: Path, expected: OffsetRanges, reader: Any = "pyarrow") -> None:
    report = verify_table(root / TABLE, expected, reader=reader)
    assert report.ok, report.summary()


# -- ranges: table tests -------------------------------------------------------------------------------------
@pytest.mark.parametrize(("given", "expected"), [
    ({}, {}),
    ({"b": {"1": [5, 9], "0": [0, 3]}, "a": {2: (1, 2)}}, {"a": {2: (1, 2)}, "b": {0: (0, 3), 1: (5, 9)}}),
    ({"a": {0: (4, 4), 1: (0, 1)}}, {"a": {1: (0, 1)}}),
    ({"a": {0: (4, 4)}}, {}),
])
def test_canonical_ranges(given: Any, expected: OffsetRanges) -> None:
    result = canonical_ranges(given)
    assert result == expected
    assert list(result) == sorted(result)
    assert all(list(parts) == sorted(parts) for parts in result.values())


@pytest.mark.parametrize("given", [
    {"a": {0: (5, 4)}}, {"a": {0: (-1, 4)}}, {"a": {-1: (0, 4)}}, {"a": {0: (1, 2, 3)}},
    {"a": {0: (0, 1), "0": (0, 1)}},
])
def test_canonical_ranges_rejects(given: Any) -> None:
    with pytest.raises(ValueError, match="a/"):
        canonical_ranges(given)


def test_batch_key_is_deterministic_and_order_free() -> None:
    key = batch_key({"a": {0: (0, 10), 1: (3, 4)}, "b": {0: (1, 2)}})
    shuffled = {"b": {"0": [1, 2]}, "a": {"1": [3, 4], "0": [0, 10], "7": [9, 9]}}
    assert key == batch_key(canonical_ranges(shuffled))
    assert len(key) == 16 and int(key, 16) >= 0
    assert key != batch_key({"a": {0: (0, 11), 1: (3, 4)}, "b": {0: (1, 2)}})


@pytest.mark.parametrize(("given", "expected"), [
    ([], []),
    ([(5, 5)], []),
    ([(5, 9), (0, 3)], [(0, 3), (5, 9)]),
    ([(0, 3), (3, 6)], [(0, 6)]),
    ([(0, 10), (2, 4), (9, 12), (20, 21)], [(0, 12), (20, 21)]),
])
def test_merge_intervals(given: list[tuple[int, int]], expected: list[tuple[int, int]]) -> None:
    assert merge_intervals(given) == expected


@pytest.mark.parametrize(("interval", "covered", "rest"), [
    ((0, 10), [], [(0, 10)]),
    ((0, 10), [(0, 10)], []),
    ((0, 10), [(-5, 20)], []),
    ((0, 10), [(3, 5)], [(0, 3), (5, 10)]),
    ((0, 10), [(0, 2), (4, 6), (8, 12)], [(2, 4), (6, 8)]),
    ((5, 10), [(0, 5), (10, 15)], [(5, 10)]),
    ((5, 10), [(0, 7)], [(7, 10)]),
])
def test_subtract_interval(interval: tuple[int, int], covered: list[tuple[int, int]],
                           rest: list[tuple[int, int]]) -> None:
    assert subtract_interval(interval, covered) == rest


def test_committed_within_and_uncommitted_partition_the_plan() -> None:
    index: IntervalIndex = {"a": {0: [(0, 50), (60, 70)], 1: [(0, 10)]}, "c": {0: [(0, 5)]}}
    ranges: OffsetRanges = {"a": {0: (40, 100), 1: (10, 20), 2: (0, 5)}, "b": {0: (0, 1)}}
    assert committed_within(ranges, index) == {"a": {0: [(40, 50), (60, 70)]}}
    assert uncommitted(ranges, index) == {"a": {0: [(50, 60), (70, 100)], 1: [(10, 20)], 2: [(0, 5)]},
                                          "b": {0: [(0, 1)]}}
    assert union(committed_within(ranges, index), uncommitted(ranges, index)) == as_index(ranges)
    assert overlap(uncommitted(ranges, index), index) == {}


def test_index_from_json_rejects_overlap_and_bad_bounds() -> None:
    assert index_from_json({"a": {"3": [[0, 2], [5, 6]]}}) == {"a": {3: [(0, 2), (5, 6)]}}
    for bad in ({"a": {"0": [[0, 5], [4, 6]]}}, {"a": {"0": [[0, 5], [5, 6]]}}, {"a": {"0": [[3, 3]]}},
                {"a": {"0": [[0]]}}):
        with pytest.raises(ValueError, match="a/0"):
            index_from_json(bad)


def test_exclusion_predicate() -> None:
    assert exclusion_predicate({}) is None
    assert exclusion_predicate({"a": {0: [(1, 5)], 2: [(7, 9)]}}) == (
        "NOT ((topic = 'a' AND `partition` = 0 AND `offset` >= 1 AND `offset` < 5) OR "
        "(topic = 'a' AND `partition` = 2 AND `offset` >= 7 AND `offset` < 9))")


# -- protocol ------------------------------------------------------------------------------------------------
def test_commit_and_read_back(tmp_path: Path) -> None:
    protocol = fresh(tmp_path)
    plan = protocol.plan(RANGES, batch_id=3)
    assert not plan.staging_dir.exists() and plan.staging_dir.parent.is_dir()
    assert plan.already_committed == {} and not plan.fully_committed
    rows = stage(plan.staging_dir, RANGES)
    manifest = protocol.commit(plan, extra={"job": "test"})

    assert manifest.rows == rows == 120 + 50 + 30
    assert not plan.staging_dir.exists()
    assert final_files(tmp_path) == sorted(f.path for f in manifest.files)
    assert all(Path(name).name.startswith(f"part-{plan.key}-") and name.endswith(".zstd.parquet")
               for name in final_files(tmp_path))
    assert {str(Path(name).parent) for name in final_files(tmp_path)} == {
        "topic=sites-a/date=2026-11-21/hour=00", "topic=sites-a/date=2026-11-21/hour=01",
        "topic=sites-a/date=2026-11-21/hour=02", "topic=sites-b/date=2026-11-21/hour=00"}
    body = json.loads((tmp_path / TABLE / "_manifests" / f"0000000000-{plan.key}.json").read_text())
    assert body["ranges"] == {"sites-a": {"0": [0, 120], "1": [10, 60]}, "sites-b": {"0": [0, 30]}}
    assert body["batch_id"] == 3 and body["rows"] == rows and body["extra"] == {"job": "test"}
    assert protocol.committed_index() == as_index(RANGES)
    assert_exactly(tmp_path, RANGES)
    assert_exactly(tmp_path, RANGES, reader="duckdb")


def test_final_names_are_deterministic(tmp_path: Path) -> None:
    names = []
    for run in ("one", "two"):
        protocol = fresh(tmp_path / run)
        commit_batch(protocol, RANGES)
        names.append(final_files(tmp_path / run))
    assert names[0] == names[1]


def test_replay_of_a_committed_batch_is_skipped_also_after_restart(tmp_path: Path) -> None:
    commit_batch(fresh(tmp_path), RANGES, batch_id=5)
    for protocol in (fresh(tmp_path), fresh(tmp_path)):  # restarted job, e.g. with a deleted checkpoint
        plan = protocol.plan(RANGES, batch_id=0)
        assert plan.fully_committed and not plan.staging_dir.exists()
        assert plan.already_committed == as_index(RANGES)
        with pytest.raises(CommitProtocolError, match="fully committed"):
            protocol.commit(plan)
    assert_exactly(tmp_path, RANGES)


def test_replay_after_a_lost_manifest_overwrites_instead_of_duplicating(tmp_path: Path) -> None:
    commit_batch(fresh(tmp_path), RANGES)
    before = final_files(tmp_path)
    for manifest in (tmp_path / TABLE / "_manifests").iterdir():
        manifest.unlink()
    protocol = CommitProtocol(tmp_path, TABLE)
    report = protocol.recover()
    assert sorted(report.orphaned) == before and final_files(tmp_path) == []
    commit_batch(protocol, RANGES)
    assert final_files(tmp_path) == before
    assert_exactly(tmp_path, RANGES)


def test_partially_committed_batch_reports_and_commits_only_the_rest(tmp_path: Path) -> None:
    protocol = fresh(tmp_path)
    commit_batch(protocol, {"sites-a": {0: (0, 100), 1: (0, 50)}})
    commit_batch(protocol, {"sites-a": {0: (120, 130)}})
    plan = protocol.plan({"sites-a": {0: (50, 150), 1: (50, 80), 2: (0, 10)}}, batch_id=9)
    assert plan.already_committed == {"sites-a": {0: [(50, 100), (120, 130)]}}
    assert plan.to_commit == {"sites-a": {0: [(100, 120), (130, 150)], 1: [(50, 80)], 2: [(0, 10)]}}
    assert plan.exclusion_predicate() == exclusion_predicate(plan.already_committed)
    stage(plan.staging_dir, plan.to_commit)
    manifest = protocol.commit(plan)
    assert manifest.covers == plan.to_commit and manifest.rows == 20 + 20 + 30 + 10
    assert protocol.committed_index() == {"sites-a": {0: [(0, 150)], 1: [(0, 80)], 2: [(0, 10)]}}
    assert_exactly(tmp_path, {"sites-a": {0: (0, 150), 1: (0, 80), 2: (0, 10)}})
    assert fresh(tmp_path).committed_index() == protocol.committed_index()


def test_stale_plan_is_refused_as_integrity_failure(tmp_path: Path) -> None:
    protocol = fresh(tmp_path)
    first, second = protocol.plan(RANGES, 1), protocol.plan(RANGES, 1)
    stage(first.staging_dir, first.to_commit)
    protocol.commit(first)
    with pytest.raises(OverlappingCommitError) as caught:
        protocol.commit(second)
    assert classify(caught.value).failure_class is FailureClass.INTEGRITY
    assert caught.value.topic == "sites-a" and caught.value.partition == 0


def test_zero_row_batch_commits_a_manifest(tmp_path: Path) -> None:
    protocol = fresh(tmp_path)
    plan = protocol.plan({"compacted": {0: (0, 10)}}, batch_id=1)
    plan.staging_dir.mkdir()
    empty = pa.table({"partition": pa.array([], pa.int32()), "offset": pa.array([], pa.int64())})
    pq.write_table(empty, plan.staging_dir / "part-00000-x.c000.zstd.parquet")
    (plan.staging_dir / "_SUCCESS").touch()
    manifest = protocol.commit(plan)
    assert manifest.files == () and manifest.rows == 0 and final_files(tmp_path) == []
    assert fresh(tmp_path).plan({"compacted": {0: (0, 10)}}, batch_id=2).fully_committed


def test_protocol_misuse_is_a_bug(tmp_path: Path) -> None:
    protocol = CommitProtocol(tmp_path, TABLE)
    with pytest.raises(CommitProtocolError, match="recover") as caught:
        protocol.plan(RANGES, 0)
    assert classify(caught.value).failure_class is FailureClass.BUG
    protocol.recover()
    plan = protocol.plan(RANGES, 0)
    with pytest.raises(CommitProtocolError, match="missing"):
        protocol.commit(plan)
    stage(plan.staging_dir, RANGES)
    (plan.staging_dir / "topic=sites-a" / "notes.txt").write_text("?")
    with pytest.raises(CommitProtocolError, match="unexpected file"):
        protocol.commit(plan)
    with pytest.raises(ValueError, match="table name"):
        CommitProtocol(tmp_path, "_hidden")


# -- crash recovery ------------------------------------------------------------------------------------------
_CHILD = """
import json, shutil, sys
from pathlib import Path
from streamwarden.stream.sink.commit_protocol import CommitProtocol
root, source, ranges = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3])
protocol = CommitProtocol(root, "events")
protocol.recover()
plan = protocol.plan(ranges, batch_id=7)
shutil.copytree(source, plan.staging_dir)
protocol.commit(plan)
"""


def run_child(root: Path, source: Path, kill_at: str | None) -> int:
    env = {k: v for k, v in os.environ.items() if k != CHAOS_ENV}
    if kill_at:
        env[CHAOS_ENV] = kill_at
    ranges = json.dumps({t: {str(p): list(i) for p, i in parts.items()} for t, parts in RANGES.items()})
    done = subprocess.run([sys.executable, "-c", _CHILD, str(root), str(source), ranges], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode in {0, -signal.SIGKILL}, done.stderr
    return done.returncode


@pytest.mark.parametrize(("kill_at", "intent", "files_moved", "manifest"), [
    ("before_intent", False, "none", False),
    ("after_intent", True, "none", False),
    ("mid_move", True, "some", False),
    ("after_move", True, "all", False),
    ("after_manifest", True, "all", True),
])
def test_kill_9_at_each_step_is_recovered(tmp_path: Path, kill_at: str, intent: bool, files_moved: str,
                                          manifest: bool) -> None:
    source = tmp_path / "spark-output"
    total_files = stage(source, RANGES) and len(list(source.rglob("*.parquet")))
    root = tmp_path / "out"
    assert run_child(root, source, kill_at) == -signal.SIGKILL
    key = batch_key(RANGES)
    staging = root / "_staging" / TABLE / key
    assert (staging / INTENT_FILE).exists() is intent
    moved = len(final_files(root))
    assert {"none": moved == 0, "some": 0 < moved < total_files, "all": moved == total_files}[files_moved]
    assert any((root / TABLE / "_manifests").glob(f"*-{key}.json")) is manifest

    protocol = CommitProtocol(root, TABLE)
    report = protocol.recover()
    assert (report.rolled_forward, report.rolled_back) == (([key], []) if intent else ([], [key]))
    assert not staging.exists()
    if intent:
        assert_exactly(root, RANGES)
        assert protocol.plan(RANGES, batch_id=8).fully_committed
    else:
        assert final_files(root) == [] and protocol.committed_index() == {}
        assert run_child(root, source, None) == 0
        assert_exactly(root, RANGES)
    again = CommitProtocol(root, TABLE).recover()
    assert (again.rolled_forward, again.rolled_back, again.orphaned) == ([], [], [])


def _fail_at(point: str) -> Any:
    def chaos(name: str) -> None:
        if name == point:
            raise RuntimeError(f"injected failure at {name}")
    return chaos


def test_leftover_of_a_failed_commit_is_rolled_forward_by_plan(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    protocol = fresh(tmp_path)
    plan = protocol.plan(RANGES, 1)
    stage(plan.staging_dir, RANGES)
    monkeypatch.setattr(commit_protocol, "chaos_point", _fail_at("mid_move"))
    with pytest.raises(RuntimeError, match="injected"):
        protocol.commit(plan)
    monkeypatch.undo()
    assert protocol.plan(RANGES, 1).fully_committed
    assert_exactly(tmp_path, RANGES)


def test_leftover_without_intent_is_cleared_by_plan(tmp_path: Path) -> None:
    protocol = fresh(tmp_path)
    plan = protocol.plan(RANGES, 1)
    stage(plan.staging_dir, {"sites-a": {0: (0, 5)}})  # a crashed Spark attempt
    replan = protocol.plan(RANGES, 1)
    assert not replan.staging_dir.exists()
    stage(replan.staging_dir, RANGES)
    protocol.commit(replan)
    assert_exactly(tmp_path, RANGES)


def test_intent_naming_a_vanished_file_is_a_staging_mismatch(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    protocol = fresh(tmp_path)
    plan = protocol.plan(RANGES, 1)
    stage(plan.staging_dir, RANGES)
    monkeypatch.setattr(commit_protocol, "chaos_point", _fail_at("after_intent"))
    with pytest.raises(RuntimeError):
        protocol.commit(plan)
    next(plan.staging_dir.rglob("*.parquet")).unlink()
    with pytest.raises(StagingMismatchError) as caught:
        CommitProtocol(tmp_path, TABLE).recover()
    assert classify(caught.value).failure_class is FailureClass.INTEGRITY


# -- invariants on load --------------------------------------------------------------------------------------
def _manifest_path(root: Path) -> Path:
    return next((root / TABLE / "_manifests").glob("*.json"))


@pytest.mark.parametrize(("edit", "message"), [
    (lambda body: "{not json", "not JSON"),
    (lambda body: json.dumps({**body, "rows": body["rows"] + 1}), "rows"),
    (lambda body: json.dumps({**body, "ranges": {"sites-a": {"0": [0, 121]}}}), "does not match its ranges"),
    (lambda body: json.dumps({**body, "covers": {"sites-z": {"0": [[0, 1]]}}}), "covers"),
    (lambda body: json.dumps({**body, "sequence": 4}), "file name"),
    (lambda body: json.dumps({**body, "table": "other"}), "belongs to table"),
    (lambda body: json.dumps({k: v for k, v in body.items() if k != "files"}), "malformed"),
    (lambda body: json.dumps({**body, "files": body["files"][:1] * 2, "rows": body["files"][0]["rows"] * 2}),
     "listed twice"),
    (lambda body: json.dumps({**body, "files": [{"path": "../x.parquet", "rows": body["rows"]}]}),
     "file path"),
])
def test_corrupt_manifest_is_refused(tmp_path: Path, edit: Any, message: str) -> None:
    commit_batch(fresh(tmp_path), RANGES)
    path = _manifest_path(tmp_path)
    path.write_text(edit(json.loads(path.read_text())))
    with pytest.raises(ManifestCorruptError, match=message) as caught:
        CommitProtocol(tmp_path, TABLE).recover()
    assert classify(caught.value).failure_class is FailureClass.INTEGRITY


def test_overlapping_manifests_are_refused(tmp_path: Path) -> None:
    commit_batch(fresh(tmp_path / "one"), {"sites-a": {0: (0, 100)}})
    commit_batch(fresh(tmp_path / "two"), {"sites-a": {0: (50, 150)}})
    body = json.loads(_manifest_path(tmp_path / "two").read_text())
    body["sequence"] = 1
    target = tmp_path / "one" / TABLE / "_manifests" / f"0000000001-{body['key']}.json"
    target.write_text(json.dumps(body))
    with pytest.raises(OverlappingCommitError, match=r"\[50, 100\)") as caught:
        CommitProtocol(tmp_path / "one", TABLE).recover()
    assert caught.value.topic == "sites-a" and caught.value.offset == 50


def test_missing_committed_file_is_refused(tmp_path: Path) -> None:
    commit_batch(fresh(tmp_path), RANGES)
    (tmp_path / TABLE / final_files(tmp_path)[0]).unlink()
    with pytest.raises(CommittedFileMissingError):
        CommitProtocol(tmp_path, TABLE).recover()


def test_recover_sets_aside_unclaimed_files_and_reports_foreign_ones(tmp_path: Path) -> None:
    commit_batch(fresh(tmp_path), RANGES)
    first = tmp_path / TABLE / final_files(tmp_path)[0]
    stray = first.with_name("part-0123456789abcdef-00000.zstd.parquet")
    foreign = first.with_name("from-someone-else.parquet")
    shutil.copy(first, stray)
    shutil.copy(first, foreign)
    report = CommitProtocol(tmp_path, TABLE).recover()
    assert report.orphaned == [str(stray.relative_to(tmp_path / TABLE))]
    assert report.foreign_files == [str(foreign.relative_to(tmp_path / TABLE))]
    assert not stray.exists() and foreign.exists()
    assert len(list((tmp_path / "_orphans" / TABLE).rglob(stray.name))) == 1
