"""What a person is told when a maintenance run fails: the failure class, the evidence, the next action."""

from __future__ import annotations

from typing import Any

from streamwarden.alerts import Alert, step_failed_alert

_NEXT_ACTIONS = {
    "INTEGRITY": (
        "Nothing was lost: a compaction whose proof failed is reverted, and a compaction that could not read its "
        "files committed nothing. The evidence names the files that differ from the Delta log: find who or what "
        "changed them (`streamwarden tables`, the object store's audit log). Until then keep maintenance off the "
        "partition: trigger maintain_tables with Params tables=[<table>] and a partition_filter of the other "
        "partitions, or pause the DAG. Then trigger validate_output to reconcile the table with Kafka."),
    "CONFIG": ("Fix the Param or setting named in the message (STREAMWARDEN_MAINTENANCE_* on the workers), then "
               "trigger maintain_tables again; nothing was changed."),
    "ENVIRONMENT": ("Another maintenance run holds the table, or storage failed. Wait for the other run (one per "
                    "table at a time), check the storage, then trigger maintain_tables again; a compaction left "
                    "unproven is proven first by the next run."),
}
_DEFAULT_ACTION = ("Read the task log and the failure document. A compaction the run committed but did not prove "
                   "is proven first by the next run: trigger maintain_tables again once the cause is fixed.")


def failure_alert(failure: dict[str, Any], *, source: str, task: str) -> Alert:
    """The alert for a failed maintenance step (``failure``: a failure document's JSON)."""
    return step_failed_alert("maintain_tables", "MAINTENANCE_FAILED", failure, source=source, task=task,
                             actions=_NEXT_ACTIONS, default_action=_DEFAULT_ACTION)
