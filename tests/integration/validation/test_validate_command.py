"""``streamwarden validate``: one validation run from the command line, its report and its exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixtures.stream_output import commit_batch, committed_paths, remove_file, settings_for, write_checkpoint
from streamwarden.cli import main
from streamwarden.tables.location import QUARANTINE, SESSION_ROWS
from streamwarden.tables.ranges import OffsetRanges

BATCH: OffsetRanges = {"sites-a": {0: (0, 60)}}


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("STREAMWARDEN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("STREAMWARDEN_OUTPUT_ROOT", str(tmp_path / "out"))
    monkeypatch.setenv("STREAMWARDEN_VALIDATION_KAFKA", "false")
    settings = settings_for(tmp_path)
    commit_batch(settings, BATCH, 0)
    write_checkpoint(settings, [BATCH])
    return tmp_path


def test_a_pass_exits_0_and_a_gap_exits_82_with_the_evidence(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate"]) == 0
    assert "passed (quarantine v1, session_rows v1)" in capsys.readouterr().out

    settings = settings_for(home)
    remove_file(settings, SESSION_ROWS, committed_paths(settings, SESSION_ROWS)[0])
    assert main(["validate", "--json"]) == 82
    summary = json.loads(capsys.readouterr().out)
    assert summary["classes"] == {"GAP": 1} and summary["findings"][0]["topic"] == "sites-a"

    assert main(["validate", "--version", f"{SESSION_ROWS}=1", "--version", f"{QUARANTINE}=1",
                 "--check", "coverage"]) == 0  # the version before the damage


def test_bad_flags_exit_78_naming_them(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--check", "speed", "--version", f"{SESSION_ROWS}=x"]) == 78
    error = capsys.readouterr().err
    assert "Param checks: unknown speed" in error and "Param versions: session_rows" in error and "'x'" in error
