"""The steps of ``restart_sessions`` as operators: check the Params, plan, send the commands, report and alert.

The work is done by :mod:`streamwarden.session_restarts.steps`; these read the run's Params and the previous step's
XCom, call the step and push its result. A step that fails pushes its failure document
(:data:`~streamwarden_airflow.operators.failing.FAILURE_KEY`) so that ``report_and_alert`` alerts with the
class, the evidence and the next action. The waiting is done by
:class:`~streamwarden_airflow.sensors.session_restarts.NewSessionsSensor`.
"""

from __future__ import annotations

import logging
from typing import Any

from airflow.sdk import BaseOperator, Context
from airflow.sdk.exceptions import AirflowFailException

from streamwarden.alerts import Alert, step_failed_alert
from streamwarden.session_restarts import steps
from streamwarden.session_restarts.alerting import exposure_alert, unanswered_alert, unread_alert
from streamwarden.session_restarts.plan import RestartPlan
from streamwarden.session_restarts.request import RestartRequest, request_from_params
from streamwarden_airflow.hooks.tables import DeltaTablesHook
from streamwarden_airflow.operators.failing import alert_failures, not_done, run_step, step_outcomes
from streamwarden_airflow.operators.run_source import run_source

log = logging.getLogger("streamwarden.session_restarts")
_ERROR_ACTIONS = {
    "CONFIG": ("Fix the Param or setting named in the message (STREAMWARDEN_SESSION_RESTART_* on the workers), "
               "then trigger restart_sessions again; no command was sent."),
    "ENVIRONMENT": ("The broker or storage could not be reached: check them, then trigger restart_sessions again "
                    "(commands already delivered are acted on once: sites answer each request id once)."),
}


class CheckRestartParamsOperator(BaseOperator):
    """Checks the run's Params (sites or pattern, reason, jitter, deadline) and the restart settings; pushes
    the checked request. A bad one fails here, naming it; nothing is sent."""

    def execute(self, context: Context) -> dict[str, Any]:
        def work() -> dict[str, Any]:
            hook = DeltaTablesHook()
            request = request_from_params(context.get("params") or {}, hook.settings, hook.restarts)
            log.info("restarting %s: %r; spread over %.0f s, %.0f s to answer each", request.describe(),
                     request.reason, request.jitter, request.deadline)
            return request.to_json()
        return run_step(context, work)


class PlanRestartsOperator(BaseOperator):
    """Finds the targeted sites on the broker and gives each a turn and a deadline; logs the plan as a table
    and pushes it.

    :param params_task_id: the :class:`CheckRestartParamsOperator` task
    """

    def __init__(self, *, params_task_id: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.params_task_id = params_task_id

    def execute(self, context: Context) -> dict[str, Any]:
        request = RestartRequest.from_json(context["ti"].xcom_pull(task_ids=self.params_task_id))
        hook = DeltaTablesHook()
        run = context.get("dag_run")
        run_key = run.run_id if run is not None else "manual"
        return run_step(context, lambda: steps.plan(hook.settings, request, run_key=run_key).to_json())


class SendRestartCommandsOperator(BaseOperator):
    """Publishes the plan's ``restart_session`` commands on the control topic; fails unless all are delivered.

    :param plan_task_id: the :class:`PlanRestartsOperator` task
    """

    def __init__(self, *, plan_task_id: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.plan_task_id = plan_task_id

    def execute(self, context: Context) -> None:
        plan = RestartPlan.from_json(context["ti"].xcom_pull(task_ids=self.plan_task_id))
        hook = DeltaTablesHook()
        run_step(context, lambda: steps.send(hook.settings, plan))


class RestartReportOperator(BaseOperator):
    """Runs whatever happened: reports every site's answer, exposure and loss (a table in the log, a file);
    alerts on sites that opened no new session by their deadline (told apart from answers the stream did not
    read: it was not running, or behind), on sites exposed beyond the limit, or on a failed step; fails the run
    then.

    :param step_ids: the tasks whose failure documents it reports, in order
    :param plan_task_id: the :class:`PlanRestartsOperator` task
    """

    def __init__(self, *, step_ids: list[str], plan_task_id: str, **kwargs: Any) -> None:
        super().__init__(trigger_rule="all_done", **kwargs)
        self.step_ids = step_ids
        self.plan_task_id = plan_task_id

    def execute(self, context: Context) -> dict[str, Any]:
        ti = context["ti"]
        hook = DeltaTablesHook()
        source = run_source(context)
        outcomes = step_outcomes(context, self.step_ids)
        if failed := alert_failures(outcomes, hook.send_alert, lambda failure, task: step_failed_alert(
                "restart_sessions", "RESTART_ERROR", failure, source=source, task=task, actions=_ERROR_ACTIONS,
                default_action="Read the task log and the failure document, fix the cause, then trigger "
                               "restart_sessions again.")):
            raise AirflowFailException(f"{failed[0].describe()}; alert sent")
        planned = ti.xcom_pull(task_ids=self.plan_task_id)
        if planned is None:  # a step died without a word, or never ran: nothing was asked of the sites
            why = not_done(outcomes) or f"{self.plan_task_id} left no plan (see its log)"
            raise AirflowFailException(f"no restart planned: {why}")
        report, path = steps.report(hook.settings, hook.restarts, RestartPlan.from_json(planned))
        alerts: list[Alert] = []
        if report.silent():
            alerts.append(unanswered_alert(report, source=source, report_path=str(path)))
        if report.unread():  # the stream, not the sites: its own alert, class and next action
            alerts.append(unread_alert(report, source=source, report_path=str(path)))
        if report.overexposed() and report.exposure_limit is not None:
            alerts.append(exposure_alert(report.overexposed(), limit=report.exposure_limit, now=report.checked_at,
                                         source=source, report_path=str(path)))
        for alert in alerts:
            hook.send_alert_once(alert)
        if alerts:
            raise AirflowFailException("; ".join(a.summary for a in alerts) + f"; report {path}")
        return report.summary(path)
