"""Alerts of validate_output: every class names the DAG to trigger with its Params; the key repeats only for the
same findings since the same passing run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from streamwarden.recovery.request import Target, request_from_params
from streamwarden.settings import load_settings
from streamwarden.validation.alerting import GRAVITY, error_alert, findings_alert, trigger
from streamwarden.validation.findings import Finding, FindingClass


def _summary(*findings: Finding) -> dict[str, Any]:
    classes: dict[str, int] = {}
    for f in findings:
        classes[f.finding_class.value] = classes.get(f.finding_class.value, 0) + 1
    return {"run_id": "r1", "passed": False, "versions": {"session_rows": 7, "quarantine": 6}, "classes": classes,
            "findings_total": len(findings), "findings": [f.to_json() for f in findings], "report": "/run/v/1.json",
            "data_docs": "/run/data_docs/index.html", "checks": ["coverage"], "notes": []}


def _finding(finding_class: FindingClass, table: str | None = "session_rows", partition: int = 0) -> Finding:
    return Finding(finding_class, table, "sites-a", partition, ((10, 12),), 2, "seen")


RECOVER = 'trigger recover_stream with Params {"target": "last_validated", "dry_run": true}'


@pytest.mark.parametrize(("finding_class", "expected"), [
    (FindingClass.GAP, RECOVER), (FindingClass.DUPLICATE, RECOVER), (FindingClass.CHECKPOINT_MISMATCH, RECOVER),
    (FindingClass.DATA_EXPIRED, RECOVER),
    (FindingClass.AUDIT_MISMATCH,
     'trigger validate_output with Params {"tables": ["session_rows"], "checks": ["coverage", "audit"]}'),
    (FindingClass.EXPECTATION_FAILED,
     'trigger validate_output with Params {"tables": ["session_rows"], "checks": ["expectations"]}'),
    (FindingClass.STALE, "trigger stream_supervisor (no Params)"),
])
def test_every_class_names_the_dag_to_trigger_and_its_params(finding_class: FindingClass, expected: str) -> None:
    assert expected in trigger(finding_class, ["session_rows"])
    assert finding_class in GRAVITY


def test_the_alert_carries_the_gravest_class_the_evidence_and_the_files() -> None:
    both = _finding(FindingClass.GAP, "session_rows+quarantine")
    alert = findings_alert(_summary(_finding(FindingClass.STALE, None), both), source="v/1", last_pass="p0")
    assert alert.failure_class == "GAP" and alert.severity == "critical"
    assert alert.summary == "validate_output: FAILED STALE 1, GAP 1 (quarantine v6, session_rows v7)"
    assert alert.failure is not None and alert.failure["data_docs"] == "/run/data_docs/index.html"
    assert alert.failure["evidence"][1] == "GAP session_rows+quarantine sites-a[0] 2 at [10, 12): seen"
    assert alert.next_action.index("GAP:") < alert.next_action.index("STALE:")
    assert 'validate_output with Params {"tables": ["quarantine", "session_rows"]}' in alert.next_action
    assert alert.verdict["label"] == "VALIDATION_FAILED(GAP,STALE)"


def test_the_key_repeats_only_for_the_same_places_since_the_same_pass() -> None:
    gap = _summary(_finding(FindingClass.GAP))
    first = findings_alert(gap, source="a", last_pass="p0").key
    assert findings_alert(gap, source="b", last_pass="p0").key == first
    assert findings_alert(gap, source="a", last_pass="p1").key != first  # it went away and came back
    assert findings_alert(_summary(_finding(FindingClass.GAP, partition=1)), source="a", last_pass="p0").key != first
    stale = findings_alert(_summary(_finding(FindingClass.STALE, None)), source="a", last_pass=None)
    assert stale.severity == "warning"


def test_a_step_that_could_not_finish_says_what_to_fix() -> None:
    alert = error_alert({"failure_class": "CONFIG", "message": "Param as_of: bad"}, source="s", task="check_params")
    assert alert.failure_class == "CONFIG" and "STREAMWARDEN_VALIDATION_*" in alert.next_action
    assert alert.summary == "validate_output: check_params failed (CONFIG): Param as_of: bad"


def _recover_stream_params(next_action: str) -> list[dict[str, Any]]:
    """Every JSON object after "recover_stream with Params " in a next action, parsed as the trigger form would."""
    found = []
    for rest in next_action.split("recover_stream with Params ")[1:]:
        params, _ = json.JSONDecoder().raw_decode(rest)
        found.append(params)
    return found


@pytest.mark.parametrize("finding_class", [FindingClass.GAP, FindingClass.DUPLICATE, FindingClass.CHECKPOINT_MISMATCH])
def test_wrong_output_names_recover_stream_with_params_that_parse(finding_class: FindingClass,
                                                                   tmp_path: Path) -> None:
    alert = findings_alert(_summary(_finding(finding_class), _finding(FindingClass.STALE, None)), source="v/1",
                           last_pass="p0")
    assert alert.severity == "critical" and alert.failure_class == finding_class.value
    [params] = _recover_stream_params(alert.next_action)
    assert params == {"target": "last_validated", "dry_run": True}
    assert request_from_params(params, load_settings(home=tmp_path)).target is Target.LAST_VALIDATED
    assert "then again with dry_run false" in alert.next_action  # the existing follow-ups stay
    assert 'validate_output with Params {"tables": ["session_rows"]}' in alert.next_action
    assert "stream_supervisor" in alert.next_action  # STALE's own action


@pytest.mark.parametrize("finding_class", [FindingClass.AUDIT_MISMATCH, FindingClass.EXPECTATION_FAILED,
                                           FindingClass.STALE, FindingClass.EXPOSURE])
def test_findings_that_do_not_show_wrong_output_name_no_roll_back(finding_class: FindingClass) -> None:
    alert = findings_alert(_summary(_finding(finding_class)), source="v/1", last_pass="p0")
    assert _recover_stream_params(alert.next_action) == []


def test_a_damaged_file_names_recover_stream_as_of_just_before_the_oldest_one_was_written(tmp_path: Path) -> None:
    older = Finding(FindingClass.STORAGE, "session_rows", "sites-a", 0, ((50, 100),), 12, "missing",
                    "2026-11-27T10:00:05+00:00")
    newer = Finding(FindingClass.STORAGE, "session_rows", "sites-a", 1, (), 3, "truncated", "2026-11-27T11:00:00+00:00")
    alert = findings_alert(_summary(newer, older, _finding(FindingClass.GAP)), source="v/1", last_pass="p0")
    assert alert.failure_class == "STORAGE" and alert.severity == "critical"
    params = _recover_stream_params(alert.next_action)
    assert params[0] == {"target": "as_of", "as_of": "2026-11-27T10:00:04+00:00", "dry_run": True}
    assert request_from_params(params[0], load_settings(home=tmp_path)).target is Target.AS_OF
    assert Finding.from_json(older.to_json()) == older  # the time travels with the report


def test_a_changed_file_is_the_gravest_and_names_recover_stream_as_of_just_before_it_was_written(
        tmp_path: Path) -> None:
    changed = Finding(FindingClass.INTEGRITY, "session_rows", "sites-a", 0, ((50, 100),), 12, "changed",
                      "2026-11-27T10:00:05+00:00")
    missing = Finding(FindingClass.STORAGE, "session_rows", "sites-a", 1, (), 3, "missing", "2026-11-27T11:00:00+00:00")
    alert = findings_alert(_summary(missing, changed), source="v/1", last_pass="p0")
    assert alert.failure_class == "INTEGRITY" and alert.severity == "critical"
    params = _recover_stream_params(alert.next_action)
    assert params[0] == {"target": "as_of", "as_of": "2026-11-27T10:00:04+00:00", "dry_run": True}
    assert "INTEGRITY: A data file's bytes changed after it was committed" in alert.next_action
