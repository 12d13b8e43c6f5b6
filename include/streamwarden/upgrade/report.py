"""The outcome of an ``upgrade_stream`` run, and the alert that tells a person about it, whatever it was.

Outcomes: ``CHECKED`` (dry run, compatible), ``REFUSED`` (a Param or the compatibility check: nothing changed),
``UPGRADED`` (the new version ran healthy for the window), ``ROLLED_BACK`` (the new version failed or a step
did; the old version runs again on its checkpoint copy and restored tables), ``ROLLBACK_FAILED`` (the stream
is left held stopped for a person). Each alert carries the failure class, the evidence (the step that failed
and its message, the verdict, the stream's own failure, the tables restored) and the next action; the outcome
is also written to the run's journal.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from streamwarden.alerts import Alert

CHECKED, REFUSED, UPGRADED, ROLLED_BACK, ROLLBACK_FAILED = (
    "CHECKED", "REFUSED", "UPGRADED", "ROLLED_BACK", "ROLLBACK_FAILED")
CHECK_STEPS = ("check_params", "check_compatibility")


@dataclass(frozen=True)
class Outcome:
    """What the run came to, and what a person is told."""

    status: str
    release: str | None
    failure_class: str | None
    severity: str
    summary: str
    evidence: list[str] = field(default_factory=list)
    next_action: str = ""
    failed_step: str | None = None

    @property
    def succeeded(self) -> bool:
        return self.status in (CHECKED, UPGRADED)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def alert(self, *, source: str, journal_path: str | None, failure: dict[str, Any] | None) -> Alert:
        label = f"UPGRADE_{self.status}" + (f"({self.failure_class})" if self.failure_class else "")
        return Alert(self.severity, f"upgrade_stream: {self.summary}"[:300],
                     {"label": label, "release": self.release, "step": self.failed_step},
                     self.failure_class, {**(failure or {}), "evidence": self.evidence, "journal": journal_path},
                     {}, self.next_action, source=source)


def _step_evidence(task: str, failure: dict[str, Any]) -> list[str]:
    lines = [f"{task} failed ({failure.get('failure_class')}): {failure.get('message', '')}"]
    details = failure.get("details") or {}
    verdict = details.get("verdict")
    if verdict:
        lines.append(f"verdict {verdict.get('label')}: {'; '.join(verdict.get('reasons') or []) or '-'}; last batch "
                     f"{verdict.get('last_batch_id')} at {verdict.get('last_progress_at')}")
    stream = details.get("stream_failure")
    if stream:
        lines.append(f"the stream's failure: {stream.get('failure_class')} (exit {stream.get('exit_code')}): "
                     f"{stream.get('message')}")
    return lines


def _rollback_evidence(rollback: dict[str, Any]) -> list[str]:
    lines = []
    for name, table in (rollback.get("tables") or {}).items():
        if "target" in table:
            undone = sum(b - a for parts in table.get("undone", {}).values() for runs in parts.values()
                         for a, b in runs)
            lines.append(f"table {name}: restored to version {table['target']} with its offsets (commit "
                         f"{table['version']}; {undone} offsets given back to the old version to replay)")
        else:
            lines.append(f"table {name}: {table.get('note')}")
    checkpoint = rollback.get("checkpoint") or {}
    if checkpoint:
        lines.append(f"checkpoint: the new version's moved to {checkpoint.get('archived')}, the copy "
                     f"{checkpoint.get('from')} put back")
    old = rollback.get("old_version") or {}
    running = (f"running, pid {old['pid']} ({old.get('verdict')})" if old.get("pid")
               else "not started (it was not running before the upgrade)")
    lines.append(f"release in force: {rollback.get('release') or 'the base settings'}; old version {running}")
    if old.get("new_version_failure"):
        lines.append(f"the new version's failure document: {old['new_version_failure']}")
    return lines


def outcome_of(*, release: str | None, dry_run: bool, failures: dict[str, dict[str, Any]],
               journal: dict[str, Any], health_minutes: float | None) -> Outcome:
    """The run's outcome from its steps' failure documents (by task, in step order) and its journal."""
    rollback_failure = failures.get("rollback")
    step, failure = next(((t, f) for t, f in failures.items() if t != "rollback"), (None, None))
    if step in CHECK_STEPS and failure is not None:
        return Outcome(REFUSED, release, str(failure.get("failure_class")), "warning",
                       f"release {release or '?'} refused by {step}: {failure.get('message', '')}",
                       _step_evidence(step, failure),
                       "Nothing was changed. Fix what the message names (a Param, the release file in the releases "
                       "folder, or the release's handler or table schema), then trigger upgrade_stream again.", step)
    if rollback_failure is not None:
        evidence = (_step_evidence(step, failure) if step and failure else []) + \
            _step_evidence("rollback", rollback_failure)
        return Outcome(ROLLBACK_FAILED, release, str(rollback_failure.get("failure_class")), "critical",
                       f"release {release or '?'}: {step or 'a step'} failed and the rollback failed too; the stream "
                       "is held stopped", evidence,
                       "Read the rollback task's log and the journal; fix the cause (storage, the broker), then clear "
                       "the rollback task of this run: it resumes from the journal (tables restored with their "
                       "offsets, checkpoint copy, previous release) and starts the old version. Only if that cannot "
                       "work: `streamwarden release-hold` and restore by hand from the journal's rollback point.",
                       "rollback")
    if failure is not None and step is not None:
        rolled = journal.get("rollback")
        evidence = _step_evidence(step, failure) + (_rollback_evidence(rolled) if rolled else [])
        if rolled is None:
            evidence.append("nothing had been changed: no rollback was needed")
        old = (rolled or {}).get("old_version") or {}
        back = ("The old version runs again with its state and every offset (nothing is lost)." if old.get("pid")
                else "The old version was not running when the upgrade began, so it is left stopped as it was, with "
                "its state and every offset: stream_supervisor judges it again (a stream that died is restarted; "
                "trigger stream_supervisor to judge it now)." if rolled else "Nothing had been changed.")
        return Outcome(ROLLED_BACK, release, str(failure.get("failure_class")), "warning",
                       f"release {release or '?'} rolled back: {step} failed ({failure.get('failure_class')}): "
                       f"{failure.get('message', '')}", evidence,
                       f"{back} Fix the release (the stream's log under run/logs names the error of a failed batch), "
                       "install it under a new name, and trigger upgrade_stream with dry_run=true first.", step)
    if not dry_run and journal.get("watched") is None:  # a step failed without a document (a timeout, a kill)
        rolled = journal.get("rollback")
        return Outcome(ROLLED_BACK if rolled else ROLLBACK_FAILED, release, "BUG", "critical",
                       f"release {release or '?'}: the upgrade did not finish (a task failed without a failure "
                       "document: timed out or killed)", _rollback_evidence(rolled) if rolled else [],
                       "Read the task logs of this run and the journal; clear the failed task to resume it from the "
                       "journal, or trigger upgrade_stream again.")
    if dry_run:
        return Outcome(CHECKED, release, None, "info", f"release {release} is compatible (dry run: nothing changed)",
                       [], "Trigger upgrade_stream again with dry_run=false to upgrade.")
    evolved = journal.get("evolved") or {}
    evidence = [f"table {name}: columns added {e.get('added')}" for name, e in evolved.items() if e.get("added")]
    watched = journal.get("watched") or {}
    evidence.append(f"health: {watched.get('reason', '-')}")
    point = journal.get("rollback_point") or {}
    evidence.append(f"rollback point kept: checkpoint copy {point.get('checkpoint_copy')}, versions "
                    f"{point.get('versions')}")
    return Outcome(UPGRADED, release, None, "info", f"release {release} runs, healthy for {health_minutes:g} min",
                   evidence, "Nothing to do. The checkpoint copy under the archive can be deleted once the release "
                   "is trusted.")
