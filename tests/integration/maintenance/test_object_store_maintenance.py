"""Maintenance of a table on an object store (a loopback S3 server): compaction, proof, revert, vacuum."""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fixtures.s3_server import BUCKET, archive, storage_options
from fixtures.small_tables import small_files_table
from streamwarden.failures import IntegrityError
from streamwarden.maintenance import steps
from streamwarden.maintenance.compaction import new_run_id
from streamwarden.maintenance.request import MaintenanceRequest
from streamwarden.maintenance.settings import load_maintenance_settings
from streamwarden.settings import Settings, load_settings
from streamwarden.tables.content import check_content, recorded_hashes

REQUEST = MaintenanceRequest(("session_rows",), 2**20, 3 * 2**18, 5, False)


@pytest.fixture()
def settings(s3_endpoint: str, tmp_path: Path) -> Settings:
    """A home under ``tmp_path`` whose output root is a fresh prefix of the loopback S3 bucket."""
    return load_settings(home=tmp_path, output_root=f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}/out",
                         storage_options=storage_options(s3_endpoint))


def test_compaction_proof_and_vacuum_work_the_same_on_s3(settings: Settings) -> None:
    location = small_files_table(settings, files_per_partition=6)
    before = location.open().to_pyarrow_table().num_rows
    store, base = location.filesystem()
    stored = len(store.get_file_info(pa.fs.FileSelector(base, recursive=True)))

    done = steps.compact(settings, REQUEST, steps.plan(settings, REQUEST), new_run_id())

    assert [(c.files_removed, c.files_added, c.proof["holds"]) for c in done] == [(6, 1, True)] * 3
    assert len(pa.table(location.open().get_add_actions())) == 3
    assert location.open().to_pyarrow_table().num_rows == before
    short = load_maintenance_settings(retention=1, recovery_window=1, force_short_retention=True)
    [cleanup] = steps.clean_up(settings, short, REQUEST)
    assert cleanup.files_deleted == 18  # the compacted files' hash manifest is not among them
    assert len(store.get_file_info(pa.fs.FileSelector(base, recursive=True))) < stored
    assert location.open().to_pyarrow_table().num_rows == before
    live = {str(a["path"]): int(a["size_bytes"]) for a in pa.table(location.open().get_add_actions()).to_pylist()}
    checked = check_content(location, live, recorded_hashes(location, location.open().version()))
    assert (checked.checked, checked.problems) == (3, ())  # the files compaction wrote, hashed on the store


def test_a_file_replaced_on_s3_is_named_and_nothing_is_compacted(settings: Settings) -> None:
    location = small_files_table(settings, files_per_partition=6)
    store, base = location.filesystem()
    first = pa.table(location.open().get_add_actions(flatten=True)).to_pylist()[0]
    victim = first["path"]
    only = replace(REQUEST, partition_filter={"topic": first["partition.topic"], "date": first["partition.date"]})
    with store.open_input_file(f"{base}/{victim}") as handle:
        data = pq.read_table(handle)
    with store.open_output_stream(f"{base}/{victim}") as handle:
        pq.write_table(data.slice(1), handle)
    version = location.open().version()

    with pytest.raises(IntegrityError, match="files differ from what the Delta log says") as failure:
        steps.compact(settings, only, steps.plan(settings, only), new_run_id())

    assert victim in failure.value.message
    assert location.open().version() == version


def test_a_file_moved_to_an_archive_tier_is_unreadable_stops_compaction_and_is_a_storage_finding(
        settings: Settings, s3_endpoint: str) -> None:
    # a lifecycle rule that moves objects to GLACIER leaves them listed at their size, but refuses a GET: the
    # store answers, one file does not
    from streamwarden.tables.storage import FileFault, check_files
    from streamwarden.validation.findings import FindingClass, storage_finding

    location = small_files_table(settings, files_per_partition=6)
    _, base = location.filesystem()
    first = pa.table(location.open().get_add_actions(flatten=True)).to_pylist()[0]
    victim = first["path"]
    archive(s3_endpoint, f"{base.removeprefix(BUCKET + '/')}/{victim}")
    only = replace(REQUEST, partition_filter={"topic": first["partition.topic"], "date": first["partition.date"]})
    version = location.open().version()

    with pytest.raises(IntegrityError, match="cannot be read; nothing was compacted") as failure:
        steps.compact(settings, only, steps.plan(settings, only), new_run_id())
    assert failure.value.details["unreadable"] == [victim]
    assert location.open().version() == version

    checked = check_files(location.open(), location, choose=list)
    [problem] = checked.problems
    assert (problem.path, problem.fault, problem.found_bytes) == (victim, FileFault.UNREADABLE, first["size_bytes"])
    finding = storage_finding(problem)
    assert finding.finding_class is FindingClass.STORAGE
    held = (first["min.offset"], first["max.offset"] + 1)
    assert (finding.partition, finding.ranges) == (first["min.partition"], (held,))
    assert "is unreadable in storage" in finding.detail and "reading it failed: AWS Error" in finding.detail
    assert "storage tier" in finding.next_action
