"""Content hashes on real Delta tables: recorded by the real DeltaSink, kept through the log's clean-up by the
manifest, checked by compaction before it rewrites a file and recorded for the files it writes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pyarrow as pa
import pytest

from fixtures.small_tables import replace_keeping_size, rows, small_files_table
from fixtures.stream_output import commit_batch, committed_paths, settings_for, table_root
from streamwarden.failures import IntegrityError
from streamwarden.maintenance import steps
from streamwarden.maintenance.cleanup import clean_table
from streamwarden.maintenance.compaction import Journal, new_run_id
from streamwarden.maintenance.request import MaintenanceRequest
from streamwarden.maintenance.steps import maintenance_folder
from streamwarden.tables.content import MANIFEST_FOLDER, check_content, file_digest, fold_manifest, recorded_hashes
from streamwarden.tables.location import SESSION_ROWS, TableLocation
from streamwarden.tables.ranges import OffsetRanges
from streamwarden.validation.content import ContentShare

BATCHES: list[OffsetRanges] = [{"sites-a": {0: (0, 100), 1: (0, 40)}}, {"sites-a": {0: (100, 150), 1: (40, 60)}},
                               {"sites-a": {0: (150, 170), 1: (60, 65)}}]


def live_files(location: TableLocation) -> dict[str, int]:
    actions = pa.table(location.open().get_add_actions(flatten=True)).to_pylist()
    return {str(a["path"]): int(a["size_bytes"]) for a in actions}


def test_the_sink_records_each_files_sha256_in_its_commit_and_sha256sum_agrees(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    for number, batch in enumerate(BATCHES):
        commit_batch(settings, batch, number, tables=(SESSION_ROWS,))
    location = TableLocation.of(settings, SESSION_ROWS)
    recorded = recorded_hashes(location, location.open().version())

    assert set(recorded.hashes) == set(committed_paths(settings, SESSION_ROWS)) and recorded.manifest_version is None
    for path, digest in recorded.hashes.items():
        printed = subprocess.run(["sha256sum", str(table_root(settings, SESSION_ROWS) / path)], check=True,
                                 capture_output=True, text=True).stdout.split()[0]
        assert digest == f"sha256:{printed}"


def test_the_hashes_outlive_the_commits_the_logs_clean_up_deletes_through_the_manifest(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    for number, batch in enumerate(BATCHES):
        commit_batch(settings, batch, number, tables=(SESSION_ROWS,))
    location = TableLocation.of(settings, SESSION_ROWS)
    location.open().alter.set_table_properties({"delta.logRetentionDuration": "interval 0 seconds"})
    expected = recorded_hashes(location, location.open().version()).hashes

    clean_table(location, maintenance_folder(settings), retention_seconds=0, dry_run=False)

    log = table_root(settings, SESSION_ROWS) / "_delta_log"
    assert not (log / f"{0:020d}.json").exists()  # the commits that carried the hashes are gone
    recorded = recorded_hashes(location, location.open().version())
    assert recorded.hashes == expected and recorded.manifest_version == location.open().version()
    assert check_content(location, live_files(location), recorded).problems == ()


def test_a_manifest_keeps_only_files_still_in_storage_and_the_newest_two_manifests(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    location = small_files_table(settings, files_per_partition=2, partitions=(("orders", "2026-11-23"),))
    store, base = location.filesystem()
    files = live_files(location)
    digests = {path: file_digest(store, f"{base}/{path}") for path in files}
    gone = sorted(files)[0]
    (location.path / gone).unlink()

    for version in range(location.open().version() + 1):
        fold_manifest(location, version, digests)

    folder = location.path / MANIFEST_FOLDER
    assert sorted(p.name for p in folder.iterdir()) == [f"{v:020d}.json" for v in (1, 2)]
    assert recorded_hashes(location, 2).hashes == {p: d for p, d in digests.items() if p != gone}


def _request(**changes: object) -> MaintenanceRequest:
    values: dict[str, object] = {"tables": ("session_rows",), "target_file_size": 2**20,
                                 "small_file_bytes": 3 * 2**18, "min_files": 5, "dry_run": False,
                                 "partition_filter": {"topic": "orders", "date": "2026-11-23"}}
    return MaintenanceRequest(**{**values, **changes})  # type: ignore[arg-type]


def _recorded_table(tmp_path: Path) -> TableLocation:
    """A table of small files whose hashes are recorded (in a manifest: these files were written without the sink)."""
    location = small_files_table(settings_for(tmp_path), files_per_partition=6)
    store, base = location.filesystem()
    fold_manifest(location, location.open().version(),
                  {path: file_digest(store, f"{base}/{path}") for path in live_files(location)})
    return location


def test_a_changed_file_stops_the_compaction_before_it_commits(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    location = _recorded_table(tmp_path)
    version = location.open().version()
    victim = next(p for p in live_files(location) if p.startswith("topic=orders/date=2026-11-23/"))
    replace_keeping_size(location.path / victim, rows("orders", 0, 0, 20).set_column(
        4, "amount", pa.array([721.0] * 20)))  # the same rows' offsets, one column's values changed, the same size
    plans = steps.plan(settings, _request())

    with pytest.raises(IntegrityError) as failure:
        steps.compact(settings, _request(), plans, new_run_id())

    assert "1 data file(s) changed since they were committed; nothing was compacted" in failure.value.message
    assert victim in failure.value.message and "recover_stream, target as_of" in failure.value.message
    assert location.open().version() == version  # no commit, nothing to revert
    assert not Journal.path(maintenance_folder(settings), SESSION_ROWS).exists()


def test_the_files_a_compaction_writes_have_their_hashes_recorded(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    location = _recorded_table(tmp_path)

    (done,) = steps.compact(settings, _request(), steps.plan(settings, _request()), new_run_id())

    assert done.version is not None and done.files_added == 1
    recorded = recorded_hashes(location, location.open().version())
    checked = check_content(location, live_files(location), recorded)
    assert checked.unrecorded == () and checked.problems == () and checked.checked == len(live_files(location))


def test_a_content_budget_checks_every_file_once_in_turn_across_runs(tmp_path: Path) -> None:
    files = {f"f{i:02d}.parquet": 3 * 2**20 for i in range(10)}  # 30 MiB, 8 MiB a run: 2 files a run
    share = ContentShare.of(tmp_path, "t", budget_mib=8)
    runs = [share.choose(files) for _ in range(6)]

    assert [len(run) for run in runs] == [2] * 6
    assert sorted(p for run in runs[:5] for p in run) == sorted(files)  # each once in five runs
    assert runs[5] == runs[0]  # and round again
    assert ContentShare.of(tmp_path, "t", budget_mib=0).choose(files) == sorted(files)
