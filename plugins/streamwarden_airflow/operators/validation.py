"""The steps of ``validate_output`` as operators: check the Params, validate the tables, report and alert.

The work is done by :mod:`streamwarden.validation.steps`; these read the run's Params and the previous
step's XCom, call the step and push its result. A step that fails for another reason than its findings
pushes its failure document (:data:`~streamwarden_airflow.operators.failing.FAILURE_KEY`) so that
``report_and_alert`` alerts with the class, the evidence and the next action.
"""

from __future__ import annotations

import logging
from typing import Any

from airflow.sdk import BaseOperator, Context
from airflow.sdk.exceptions import AirflowFailException

from streamwarden.validation import steps
from streamwarden.validation.alerting import error_alert, findings_alert
from streamwarden.validation.report import last_validated
from streamwarden.validation.request import ValidationRequest, request_from_params
from streamwarden_airflow.hooks.tables import DeltaTablesHook
from streamwarden_airflow.operators.failing import alert_failures, not_done, run_step, step_outcomes
from streamwarden_airflow.operators.run_source import run_source

log = logging.getLogger("streamwarden.validation")


class CheckValidationParamsOperator(BaseOperator):
    """Checks the run's Params (tables, checks, versions or as_of) and the validation settings; pushes the
    checked request. A bad Param or setting fails here, naming it; nothing is read yet."""

    def execute(self, context: Context) -> dict[str, Any]:
        def work() -> dict[str, Any]:
            hook = DeltaTablesHook()
            request = request_from_params(context.get("params") or {}, hook.settings, hook.validation)
            log.info("validating %s at %s; checks: %s", ", ".join(request.tables),
                     request.versions or (request.as_of.isoformat() if request.as_of else "their newest versions"),
                     ", ".join(sorted(c.value for c in request.checks)))
            return request.to_json()
        return run_step(context, work)


class ValidateTablesOperator(BaseOperator):
    """Pins every table at one version and makes the requested checks; writes the report (and, when every
    check passed, the last validated versions); logs it as a table and pushes its summary. Fails when
    something was found (``report_and_alert`` then alerts).

    :param params_task_id: the :class:`CheckValidationParamsOperator` task
    """

    def __init__(self, *, params_task_id: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.params_task_id = params_task_id

    def execute(self, context: Context) -> dict[str, Any]:
        request = ValidationRequest.from_json(context["ti"].xcom_pull(task_ids=self.params_task_id))
        hook = DeltaTablesHook()
        recorded = run_step(context, lambda: steps.run(hook.settings, hook.validation, request, hook.restarts))
        summary = recorded.report.summary(recorded.path)
        context["ti"].xcom_push(key="return_value", value=summary)
        log.info("report: %s", recorded.path)
        if summary.get("data_docs"):
            log.info("Data Docs: %s", summary["data_docs"])
        validated: dict[str, Any] | None = recorded.last_validated
        if validated is not None:
            log.info("last validated versions: %s", ", ".join(
                f"{name} v{entry['version']}" for name, entry in sorted(validated["tables"].items())))
        if not recorded.report.passed:
            counted = ", ".join(f"{c} {n}" for c, n in recorded.report.classes().items())
            raise AirflowFailException(f"validation FAILED: {counted}; report {recorded.path}")
        return summary


class ValidationReportOperator(BaseOperator):
    """Runs whatever happened: alerts on findings (class, evidence, the DAG to trigger next; once for the same
    findings until a run passes) or on a step's failure document, and fails the run then, as it does when a
    step failed without one or never ran (naming it); on a pass, logs the last validated versions.

    :param params_task_id, validate_task_id: the steps whose results it reports
    """

    def __init__(self, *, params_task_id: str, validate_task_id: str, **kwargs: Any) -> None:
        super().__init__(trigger_rule="all_done", **kwargs)
        self.step_ids = (params_task_id, validate_task_id)

    def execute(self, context: Context) -> dict[str, Any]:
        ti = context["ti"]
        source = run_source(context)
        hook = DeltaTablesHook()
        outcomes = step_outcomes(context, self.step_ids)
        if failed := alert_failures(outcomes, hook.send_alert,
                                    lambda failure, task: error_alert(failure, source=source, task=task)):
            raise AirflowFailException(f"{failed[0].describe()}; alert sent")
        summary: dict[str, Any] | None = ti.xcom_pull(task_ids=self.step_ids[1])
        if summary is None:  # a step died without a word, or never ran: nothing was validated
            why = not_done(outcomes) or f"{self.step_ids[1]} left no report"
            raise AirflowFailException(f"nothing validated: {why}")
        validated = last_validated(hook.settings.run_paths.validation) or {"tables": {}}
        if not summary["passed"]:
            passes = sorted((entry["validated_at"], entry["run_id"]) for entry in validated["tables"].values())
            alert = findings_alert(summary, source=source, last_pass=passes[-1][1] if passes else None)
            hook.send_alert_once(alert)
            raise AirflowFailException(f"validation FAILED: {summary['classes']}; report {summary['report']}")
        log.info("validation passed (%s); last validated: %s", ", ".join(summary["checks"]), ", ".join(
            f"{name} v{entry['version']} at {entry['validated_at']}"
            for name, entry in sorted(validated["tables"].items())) or "none yet (not every check ran)")
        return summary
