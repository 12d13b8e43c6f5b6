"""What a person is told when a validation run finds something: the class, the evidence, the DAG to trigger next.

One alert per run, whatever it found: its summary names every class, the failure class is the gravest one,
the evidence is the first findings (table, topic, partition, offsets, counts) with the report's path and the
Data Docs, and the next action names the DAG to trigger and its Params, prefilled from the findings. The
alert's key is the classes and the places found since the last passing run, so the same unchanged problem
found by every scheduled run alerts once, and a new one (or the same one again after a pass) alerts again.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta
from typing import Any

from streamwarden.alerts import Alert, step_failed_alert
from streamwarden.validation.findings import NEXT_ACTIONS, FindingClass

GRAVITY = (FindingClass.INTEGRITY, FindingClass.STORAGE, FindingClass.GAP, FindingClass.DUPLICATE,
           FindingClass.DATA_EXPIRED, FindingClass.CHECKPOINT_MISMATCH, FindingClass.AUDIT_MISMATCH,
           FindingClass.EXPECTATION_FAILED, FindingClass.STALE, FindingClass.EXPOSURE)
"""Finding classes, gravest first: the alert's failure class is the first found."""
EVIDENCE_SHOWN = 10


WARNINGS = frozenset({FindingClass.STALE, FindingClass.EXPOSURE})
"""Classes that alone make a warning, not a critical alert: nothing is wrong in the tables yet."""


def trigger(finding_class: FindingClass, tables: list[str], sites: list[str] | None = None,
            written: list[str] | None = None) -> str:
    """The DAG to trigger for ``finding_class`` and its Params, as a sentence (``sites``: the topics found;
    ``written``: when the damaged files of STORAGE and INTEGRITY findings were written)."""
    if finding_class in (FindingClass.STORAGE, FindingClass.INTEGRITY):
        before = _just_before(min(written)) if written else "<a time before the damaged file was written>"
        return (f"unless the file can be put back, trigger recover_stream with Params "
                f"{_params({'target': 'as_of', 'as_of': before, 'dry_run': True})} to see what it rolls back and "
                f"replays, then again with dry_run false")
    if finding_class is FindingClass.EXPOSURE:
        return f"trigger restart_sessions with Params {_params({'sites': sites or [], 'reason': 'exposure'})}"
    scope: dict[str, Any] = {"tables": tables} if tables else {}
    recover = _params({"target": "last_validated", "dry_run": True})
    if finding_class in (FindingClass.GAP, FindingClass.DUPLICATE, FindingClass.CHECKPOINT_MISMATCH):
        return (f"trigger recover_stream with Params {recover} to see the blast radius, then again with dry_run "
                f"false; afterwards validate_output with Params {_params(scope)}")
    if finding_class is FindingClass.DATA_EXPIRED:
        return f"trigger recover_stream with Params {recover} to see which offsets are lost for good"
    if finding_class is FindingClass.AUDIT_MISMATCH:
        return f"trigger validate_output with Params {_params({**scope, 'checks': ['coverage', 'audit']})}"
    if finding_class is FindingClass.EXPECTATION_FAILED:
        return (f"once the producer or handler is fixed (upgrade_stream for a new handler), trigger validate_output "
                f"with Params {_params({**scope, 'checks': ['expectations']})}")
    return "trigger stream_supervisor (no Params) and read its verdict"


def findings_alert(summary: dict[str, Any], *, source: str, last_pass: str | None) -> Alert:
    """The alert for a run that found something (``summary``: :meth:`~.report.ValidationReport.summary`;
    ``last_pass``: the id of the newest run that passed, part of the key: a problem that went away and came
    back alerts again)."""
    classes = [c for c in GRAVITY if c.value in summary["classes"]]
    gravest = classes[0]
    findings = summary["findings"]
    actions = []
    for finding_class in classes:
        tables = sorted({name for f in findings if f["class"] == finding_class.value and f["table"]
                         for name in f["table"].split("+")})  # "session_rows+quarantine": offsets of both
        sites = sorted({f["topic"] for f in findings if f["class"] == finding_class.value})
        written = [f["written_at"] for f in findings if f["class"] == finding_class.value and f.get("written_at")]
        actions.append(f"{finding_class.value}: {NEXT_ACTIONS[finding_class]} Next: "
                       f"{trigger(finding_class, tables, sites, written)}.")
    counted = ", ".join(f"{c} {n}" for c, n in summary["classes"].items())
    versions = ", ".join(f"{name} v{version}" for name, version in sorted(summary["versions"].items()))
    evidence = [f"{f['class']} {f['table'] or '-'} {f['topic']}{'' if f['partition'] < 0 else [f['partition']]} "
                f"{f['count']:,} at "
                f"{', '.join(f'[{s}, {e})' for s, e in f['ranges']) or '-'}: {f['detail']}"
                for f in findings[:EVIDENCE_SHOWN]]
    failure = {"failure_class": gravest.value, "classes": summary["classes"], "versions": summary["versions"],
               "findings_total": summary["findings_total"], "evidence": evidence, "report": summary["report"],
               "data_docs": summary.get("data_docs")}
    places = sorted({(f["class"], f["table"] or "", f["topic"], f["partition"]) for f in findings})
    key = "validation:" + hashlib.sha256(json.dumps([last_pass, places]).encode()).hexdigest()[:16]
    severity = "warning" if set(classes) <= WARNINGS else "critical"
    return Alert(severity, f"validate_output: FAILED {counted} ({versions or 'no table'})"[:300],
                 {"label": f"VALIDATION_FAILED({','.join(c.value for c in classes)})", "run_id": summary["run_id"]},
                 gravest.value, failure, {}, " ".join(actions), source=source, key=key)


_ERROR_ACTIONS = {
    "CONFIG": ("Fix the Param or setting named in the message (STREAMWARDEN_VALIDATION_* on the workers), then "
               "trigger validate_output again; nothing was changed."),
    "ENVIRONMENT": ("Storage or the broker could not be reached: check them, then trigger validate_output again "
                    "(nothing was changed; the last validated versions stay)."),
}


def error_alert(failure: dict[str, Any], *, source: str, task: str) -> Alert:
    """The alert for a step that could not finish (``failure``: a failure document's JSON): nothing was
    validated, so the last validated versions stay."""
    return step_failed_alert("validate_output", "VALIDATION_ERROR", failure, source=source, task=task,
                             actions=_ERROR_ACTIONS, default_action=(
                                 "Read the task log and the failure document, fix the cause, then trigger "
                                 "validate_output again."))


def _params(params: dict[str, Any]) -> str:
    return json.dumps(params)


def _just_before(moment: str) -> str:
    """One second before an ISO-8601 time: the newest version committed by then is older than what was written
    at ``moment``."""
    return (datetime.fromisoformat(moment) - timedelta(seconds=1)).isoformat(timespec="seconds")
