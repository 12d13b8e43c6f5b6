"""Compaction of real Delta tables: fewer files, every row kept and proven, a bad rewrite reverted."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fixtures.small_tables import replace_keeping_size, rows, run_maintenance, settings_for, small_files_table
from streamwarden.failures import IntegrityError
from streamwarden.maintenance import steps
from streamwarden.maintenance.compaction import Journal, new_run_id
from streamwarden.maintenance.proof import prove
from streamwarden.maintenance.request import MaintenanceRequest
from streamwarden.tables.location import TableLocation


def request(**changes: object) -> MaintenanceRequest:
    values: dict[str, object] = {"tables": ("session_rows",), "target_file_size": 2**20,
                                 "small_file_bytes": 3 * 2**18, "min_files": 5, "dry_run": False}
    return MaintenanceRequest(**{**values, **changes})  # type: ignore[arg-type]


def content(location: TableLocation, version: int | None = None) -> list[tuple[object, ...]]:
    """Every row of the table at ``version``, sorted: what a reader sees."""
    table = location.open(version).to_pyarrow_table()
    return sorted(zip(*(table.column(n).to_pylist() for n in sorted(table.column_names)), strict=True))


def files_by_partition(location: TableLocation) -> dict[str, int]:
    actions = pa.table(location.open().get_add_actions(flatten=True)).to_pylist()
    counts: dict[str, int] = {}
    for action in actions:
        label = f"{action['partition.topic']}/{action['partition.date']}"
        counts[label] = counts.get(label, 0) + 1
    return counts


def test_compaction_leaves_one_file_per_partition_and_proves_every_row(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    location = small_files_table(settings)
    before, version_before = content(location), location.open().version()
    plans = steps.plan(settings, request())
    assert [p.label for p in plans[0].to_compact] == [
        "topic=orders/date=2026-11-23", "topic=orders/date=2026-11-24", "topic=payments/date=2026-11-23"]

    done = steps.compact(settings, request(), plans, new_run_id())

    assert files_by_partition(location) == {"orders/2026-11-23": 1, "orders/2026-11-24": 1, "payments/2026-11-23": 1}
    assert content(location) == before
    assert [c.version for c in done] == [version_before + 1, version_before + 2, version_before + 3]
    assert all(c.files_removed == 12 and c.files_added == 1 and c.rows == 240 for c in done)
    figures = done[0].proof["topic_partitions"]
    assert [(f["topic"], f["partition"], f["rows"], f["min_offset"], f["max_offset"]) for f in figures] == [
        ("orders", 0, 120, 0, 209), ("orders", 1, 120, 20, 229)]
    assert not Journal.path(steps.maintenance_folder(settings), "session_rows").exists()


def test_partition_filter_and_min_files_limit_what_is_compacted(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    location = small_files_table(settings, files_per_partition=6)
    plans = steps.plan(settings, request(partition_filter={"topic": "orders"}, min_files=6))
    assert [p.label for p in plans[0].partitions] == ["topic=orders/date=2026-11-23", "topic=orders/date=2026-11-24"]
    steps.compact(settings, request(), plans, new_run_id())
    assert files_by_partition(location) == {"orders/2026-11-23": 1, "orders/2026-11-24": 1, "payments/2026-11-23": 6}
    assert not steps.plan(settings, request(min_files=7))[0].to_compact


def tamper(location: TableLocation, *, keep_size: bool = True) -> str:
    """Replace one data file of ``orders/2026-11-23`` outside the log: the same rows but one, dropped."""
    actions = pa.table(location.open().get_add_actions(flatten=True)).to_pylist()
    victim = next(a["path"] for a in actions
                  if (a["partition.topic"], a["partition.date"]) == ("orders", "2026-11-23"))
    path = location.path / victim
    if keep_size:
        replace_keeping_size(path, pq.read_table(path).slice(1))
    else:
        pq.write_table(pq.read_table(path).slice(1), path)
    return str(victim)


def test_a_file_replaced_outside_the_log_fails_the_proof_and_the_compaction_is_reverted(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    location = small_files_table(settings)
    victim = tamper(location)
    files_before = files_by_partition(location)
    plans = steps.plan(settings, request(partition_filter={"topic": "orders", "date": "2026-11-23"}))

    with pytest.raises(IntegrityError) as failure:
        steps.compact(settings, request(), plans, new_run_id())

    compaction = location.open().version() - 1
    assert f"compaction commit {compaction} did not keep every row" in failure.value.message
    assert victim in failure.value.message  # the evidence: which file disagrees with the log
    assert failure.value.details["reverted_by"] == compaction + 1
    assert files_by_partition(location) == files_before
    files_now = {a["path"] for a in pa.table(location.open().get_add_actions()).to_pylist()}
    assert files_now == {a["path"] for a in pa.table(location.open(compaction - 1).get_add_actions()).to_pylist()}


def test_a_writer_committing_beside_the_compaction_is_never_taken_for_it_nor_reverted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another writer (the stream) commits right after each time maintenance opens the table: delta-rs's
    history then numbers its commits one off, and a compaction that trusted it proved, and reverted, the
    stream's batch instead of its own commit (seen in a long run: a batch's rows deleted)."""
    from deltalake import write_deltalake

    settings = settings_for(tmp_path)
    location = small_files_table(settings)
    opened = TableLocation.open
    appended: list[int] = []

    def open_then_another_writer_commits(self: TableLocation, version: int | None = None) -> object:
        table = opened(self, version)
        if version is None:  # the newest: what the stream would commit on top of right now
            write_deltalake(self.uri, rows("payments", 1, 10_000 + 10 * len(appended), 20), mode="append")
            appended.append(table.version() + 1)
        return table

    monkeypatch.setattr(TableLocation, "open", open_then_another_writer_commits)
    done = steps.compact(settings, request(), steps.plan(settings, request()), new_run_id())
    monkeypatch.undo()

    assert [c.version is not None for c in done] == [True] * 3 and appended
    newest = location.open()
    history = {int(c["version"]): c for c in newest.history(newest.version() + 1)}  # a fresh snapshot: exact
    assert all(history[c.version]["operation"] == "OPTIMIZE" for c in done if c.version is not None)
    assert not any("streamwarden.revert_of" in c for c in history.values())
    rows_now = newest.to_pyarrow_table().num_rows
    assert rows_now == 3 * 12 * 20 + 20 * len(appended)  # every row of both writers is there


def test_a_revert_refuses_a_commit_that_is_not_the_runs_own_compaction(tmp_path: Path) -> None:
    from streamwarden.maintenance.proof import revert

    settings = settings_for(tmp_path)
    location = small_files_table(settings)
    newest = location.open().version()  # the last append: another writer's commit
    with pytest.raises(IntegrityError, match=f"refusing to revert version {newest}: it is not this run's compaction"):
        revert(location, newest, {"streamwarden.maintenance_run": "r1", "streamwarden.partition": "p"})
    assert location.open().version() == newest  # nothing was committed


def test_a_file_of_another_size_fails_the_compaction_as_integrity_naming_it(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    location = small_files_table(settings)
    victim = tamper(location, keep_size=False)
    version = location.open().version()
    plans = steps.plan(settings, request(partition_filter={"topic": "orders", "date": "2026-11-23"}))

    with pytest.raises(IntegrityError, match="files differ from what the Delta log says") as failure:
        steps.compact(settings, request(), plans, new_run_id())

    assert victim in failure.value.message and "nothing was compacted" in failure.value.message
    assert location.open().version() == version


def test_a_rewrite_that_changes_rows_is_caught_by_the_figures(tmp_path: Path) -> None:
    """A compacted file whose rows differ (one value changed, same count and offsets): the hash differs."""
    settings = settings_for(tmp_path)
    location = small_files_table(settings, files_per_partition=6)
    plans = steps.plan(settings, request(partition_filter={"topic": "payments"}))
    done = steps.compact(settings, request(), plans, new_run_id())
    assert prove(location, done[0].version or 0).holds
    added = next(a for a in pa.table(location.open().get_add_actions(flatten=True)).to_pylist()
                 if a["partition.topic"] == "payments")
    path = location.path / added["path"]
    data = pq.read_table(path)
    amounts = data.column("amount").to_pylist()
    data = data.set_column(data.schema.get_field_index("amount"), "amount", pa.array([amounts[0] + 1, *amounts[1:]]))
    replace_keeping_size(path, data)

    proof = prove(location, done[0].version or 0)

    assert not proof.holds
    [difference] = proof.differences  # same size, rows and offsets as the log says: only the hash tells
    assert difference.startswith("payments[") and ": before 60 rows, offsets [" in difference
    before, after = difference.split(": before ")[1].split(", after ")
    assert before.rsplit(", hash ", 1)[0] == after.rsplit(", hash ", 1)[0]
    assert before.rsplit(", hash ", 1)[1] != after.rsplit(", hash ", 1)[1]


def test_kill_after_the_commit_leaves_a_journal_and_the_next_run_proves_it(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    location = small_files_table(settings)
    before = content(location)
    version = location.open().version()

    killed = run_maintenance(settings, kill_at="after_compaction_commit")

    assert killed.returncode == -9, killed.stderr
    journal = Journal.path(steps.maintenance_folder(settings), "session_rows")
    assert journal.exists()
    assert location.open().version() == version + 1  # one partition committed, not proven yet
    plans = steps.plan(settings, request())
    done = steps.compact(settings, request(), plans, new_run_id())
    assert done[0].version == version + 1 and done[0].proof["holds"] and done[0].earlier_run  # proven first
    assert [c.version for c in done[1:]] == [version + 2, version + 3]
    assert not journal.exists()
    assert content(location) == before
    assert set(files_by_partition(location).values()) == {1}


def test_kill_before_the_commit_commits_nothing_and_the_next_run_compacts(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    location = small_files_table(settings)
    version = location.open().version()

    assert run_maintenance(settings, kill_at="before_compaction_commit").returncode == -9
    assert location.open().version() == version
    done = steps.compact(settings, request(), steps.plan(settings, request()), new_run_id())
    assert done[0].version is None  # the journal's partition: nothing was committed
    assert [c.version for c in done[1:]] == [version + 1, version + 2, version + 3]


def test_two_runs_never_compact_one_table_together(tmp_path: Path) -> None:
    from streamwarden.tables.lock import TableBusyError, table_lock

    settings = settings_for(tmp_path)
    small_files_table(settings, files_per_partition=6)
    held = table_lock(steps.maintenance_folder(settings) / "locks", "session_rows")
    with held, pytest.raises(TableBusyError, match=f"pid {os.getpid()}"):
        steps.compact(settings, request(), steps.plan(settings, request()), new_run_id())
    assert steps.compact(settings, request(), steps.plan(settings, request()), new_run_id())


def test_cleanup_vacuums_replaced_and_never_committed_files_and_checkpoints_the_log(tmp_path: Path) -> None:
    from streamwarden.maintenance.settings import load_maintenance_settings

    settings = settings_for(tmp_path)
    location = small_files_table(settings, files_per_partition=6)
    crashed = location.path / "batch-00000000deadbeef" / "topic=orders" / "date=2026-11-23"
    crashed.mkdir(parents=True)
    committed = next((location.path / "topic=orders" / "date=2026-11-23").glob("*.parquet"))
    shutil.copy(committed, crashed / "part-0.parquet")
    steps.compact(settings, request(), steps.plan(settings, request()), new_run_id())
    before = content(location)
    short = load_maintenance_settings(retention=1, recovery_window=1, force_short_retention=True)

    dry = steps.clean_up(settings, short, request(dry_run=True))
    assert dry[0].files_deleted == 19 and dry[0].checkpoint_version is None  # 18 replaced + 1 never committed
    assert (crashed / "part-0.parquet").exists()
    done = steps.clean_up(settings, short, request())

    assert done[0].files_deleted == 19
    assert not (crashed / "part-0.parquet").exists()
    assert len(list(location.path.rglob("*.parquet"))) == 3 + 1  # 3 compacted files + the log checkpoint
    assert content(location) == before
    assert (location.path / "_delta_log" / "_last_checkpoint").exists()


def test_cleanup_refuses_while_a_compaction_is_unproven(tmp_path: Path) -> None:
    from streamwarden.maintenance.settings import load_maintenance_settings

    settings = settings_for(tmp_path)
    small_files_table(settings, files_per_partition=6)
    assert run_maintenance(settings, kill_at="after_compaction_commit").returncode == -9
    with pytest.raises(IntegrityError, match="vacuum would delete its evidence"):
        steps.clean_up(settings, load_maintenance_settings(), request())
