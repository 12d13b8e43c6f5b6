"""Params and settings of maintenance are checked before anything changes, each bad one named."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixtures.small_tables import settings_for
from streamwarden.failures import ConfigError
from streamwarden.maintenance.request import request_from_params
from streamwarden.maintenance.settings import MiB, load_maintenance_settings
from streamwarden.settings_loading import SettingsError


def test_defaults_come_from_the_settings(tmp_path: Path) -> None:
    request = request_from_params({}, settings_for(tmp_path), load_maintenance_settings(min_files=7))
    assert request.tables == ("session_rows", "quarantine")
    assert (request.target_file_size, request.small_file_bytes, request.min_files) == (128 * MiB, 96 * MiB, 7)
    assert not request.dry_run and request.partition_filter == {}


def test_params_override_and_a_filter_is_parsed(tmp_path: Path) -> None:
    params = {"tables": ["quarantine"], "target_file_size_mib": 64, "min_files": 3, "dry_run": True,
              "partition_filter": " topic=orders , date=2026-11-23"}
    request = request_from_params(params, settings_for(tmp_path), load_maintenance_settings())
    assert request.tables == ("quarantine",)
    assert (request.target_file_size, request.min_files, request.dry_run) == (64 * MiB, 3, True)
    assert request.partition_filter == {"topic": "orders", "date": "2026-11-23"}


def test_every_bad_param_is_named_in_one_error(tmp_path: Path) -> None:
    params = {"tables": ["records", "session_rows"], "target_file_size_mib": 0, "min_files": 1, "dry_run": "yes",
              "partition_filter": "topic"}
    with pytest.raises(ConfigError) as failure:
        request_from_params(params, settings_for(tmp_path), load_maintenance_settings())
    message = failure.value.message
    for expected in ("Param tables: records not among this pipeline's tables (session_rows, quarantine)",
                     "Param target_file_size_mib: expected a whole number of MiB >= 1, got 0",
                     "Param min_files: expected a whole number >= 2, got 1",
                     "Param dry_run: expected true or false, got 'yes'",
                     "Param partition filter 'topic': 'topic' is not column=value"):
        assert expected in message


@pytest.mark.parametrize(("variables", "named"), [
    ({"STREAMWARDEN_MAINTENANCE_RETENTION": "30m", "STREAMWARDEN_MAINTENANCE_RECOVERY_WINDOW": "10m"},
     "STREAMWARDEN_MAINTENANCE_RETENTION (1800s) is under one hour"),
    ({"STREAMWARDEN_MAINTENANCE_RETENTION": "2h", "STREAMWARDEN_MAINTENANCE_RECOVERY_WINDOW": "3h"},
     "must not be shorter than STREAMWARDEN_MAINTENANCE_RECOVERY_WINDOW"),
    ({"STREAMWARDEN_MAINTENANCE_MIN_FILES": "1"}, "STREAMWARDEN_MAINTENANCE_MIN_FILES"),
    ({"STREAMWARDEN_MAINTENANCE_TARGET_SIZE": "1"}, "did you mean STREAMWARDEN_MAINTENANCE_TARGET_FILE_SIZE"),
])
def test_bad_maintenance_settings_name_the_variable(monkeypatch: pytest.MonkeyPatch, variables: dict[str, str],
                                                    named: str) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError, match=named.replace("(", r"\(").replace(")", r"\)")):
        load_maintenance_settings()


def test_a_short_retention_is_allowed_when_forced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMWARDEN_MAINTENANCE_RETENTION", "10m")
    monkeypatch.setenv("STREAMWARDEN_MAINTENANCE_RECOVERY_WINDOW", "5m")
    monkeypatch.setenv("STREAMWARDEN_MAINTENANCE_FORCE_SHORT_RETENTION", "true")
    assert load_maintenance_settings().retention == 600
