"""The approval step of the plan-approve-act DAGs: Airflow's ``ApprovalOperator``, its answer recorded whatever
it is (:mod:`streamwarden.approvals`)."""

from __future__ import annotations

from typing import Any

from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk import Context

from streamwarden.approvals import ANSWER_KEY, answer_from_event


class RecordedApprovalOperator(ApprovalOperator):
    """``ApprovalOperator`` that pushes the answer (XCom ``answer``) before acting on it: on Reject the base
    operator skips what follows by raising, and would leave a report nothing to read."""

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        context["ti"].xcom_push(key=ANSWER_KEY, value=answer_from_event(event).to_json())
        return super().execute_complete(context, event)
