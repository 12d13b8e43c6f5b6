"""``streamwarden maintain``: one maintenance run from the command line, its report and its exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from fixtures.small_tables import settings_for, small_files_table
from streamwarden.cli import main
from streamwarden.maintenance.report import read_history


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("STREAMWARDEN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("STREAMWARDEN_OUTPUT_ROOT", str(tmp_path / "out"))
    return tmp_path


def test_dry_run_then_run_print_the_plan_and_the_report(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = settings_for(home)
    location = small_files_table(settings, files_per_partition=6)

    assert main(["maintain", "--dry-run", "--target-file-size-mib", "1"]) == 0
    dry = capsys.readouterr().out
    assert "topic=orders/date=2026-11-23" in dry and "would compact" in dry and "vacuum would delete 0 files" in dry
    assert len(pa.table(location.open().get_add_actions())) == 18

    assert main(["maintain", "--table", "session_rows", "--target-file-size-mib", "1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["outcome"] == "ok" and report["tables"]["session_rows"]["files_after"] == 3
    assert len(pa.table(location.open().get_add_actions())) == 3
    assert [h["outcome"] for h in read_history(settings.run_paths.maintenance / "history.jsonl")] == [
        "dry run", "ok"]


def test_bad_flags_and_settings_exit_78_naming_them(home: Path, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    assert main(["maintain", "--min-files", "1", "--partition-filter", "topic"]) == 78
    error = capsys.readouterr().err
    assert "Param min_files: expected a whole number >= 2, got 1" in error and "is not column=value" in error
    monkeypatch.setenv("STREAMWARDEN_MAINTENANCE_RETENTION", "10m")
    assert main(["maintain"]) == 78
    assert "STREAMWARDEN_MAINTENANCE_RETENTION" in capsys.readouterr().err
