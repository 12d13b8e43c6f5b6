"""How a Streamwarden step fails in Airflow: its failure document pushed for the run's report task, no retry."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowFailException

from streamwarden.failures import classify

T = TypeVar("T")
FAILURE_KEY = "failure"
"""XCom key of a failed step's failure document (:meth:`streamwarden.failures.Failure.to_json`)."""


def run_step(context: Context, work: Callable[[], T]) -> T:
    """Run ``work``; on failure push its classified failure document (XCom :data:`FAILURE_KEY`) for the report
    task to alert with, and fail the task without retry (a retry would not change a classified failure)."""
    try:
        return work()
    except Exception as exc:
        document = classify(exc).to_json()
        context["ti"].xcom_push(key=FAILURE_KEY, value=document)
        raise AirflowFailException(f"{document['failure_class']}: {document['message']}") from exc
