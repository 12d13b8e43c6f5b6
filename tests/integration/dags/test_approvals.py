"""The test helper that answers a human-in-the-loop request during ``dag.test()`` (tests/fixtures/approvals.py), and the
DAGs' approval step that records the answer whatever it is, on a tiny DAG: an approval, a step after it, and a
report that runs whatever happened (all_done) and reads the answer."""

from __future__ import annotations

from typing import Any

import pytest

from fixtures.approvals import answer_in_process
from streamwarden.approvals import ANSWER_KEY

pytestmark = pytest.mark.usefixtures("airflow_db")


def _dag(dag_id: str) -> Any:
    from airflow.sdk import DAG, task

    from streamwarden_airflow.operators.approval import RecordedApprovalOperator

    with DAG(dag_id, schedule=None, catchup=False) as dag:
        @task
        def plan() -> str:
            return "| table | version |\n|---|---|\n| records | 3 |"

        approve = RecordedApprovalOperator(task_id="approve", subject="Approve the plan?",
                                           body="{{ ti.xcom_pull('plan') }}")

        @task
        def change() -> str:
            return "changed"

        @task(trigger_rule="all_done")
        def report(ti: Any = None) -> dict[str, Any] | None:
            answer: dict[str, Any] | None = ti.xcom_pull(task_ids="approve", key=ANSWER_KEY)
            return answer

        approve_after = plan() >> approve
        approve_after >> change() >> report()
    _serialize(dag)
    return dag


def _serialize(dag: Any) -> None:
    """Write the DAG into the metadata DB as the dags folder's, as parsing would: ``dag.test()`` runs only
    serialized DAGs, and this one lives in no DAG file."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.collection import update_dag_parsing_results_in_db
    from airflow.serialization.serialized_objects import LazyDeserializedDAG
    from airflow.utils.session import create_session

    with create_session() as session:
        DagBundlesManager().sync_bundles_to_db(session=session)
        session.commit()
        update_dag_parsing_results_in_db("dags-folder", None, [LazyDeserializedDAG.from_dag(dag)], {}, None, set(),
                                         session=session)


def _report(run: Any) -> dict[str, Any] | None:
    """What the report task read of the approval's recorded answer."""
    (report,) = [ti for ti in run.get_task_instances() if ti.task_id == "report"]
    answer: dict[str, Any] | None = report.xcom_pull(task_ids="report")
    return answer


def _states(run: Any) -> dict[str, str | None]:
    return {ti.task_id: ti.state for ti in run.get_task_instances()}


def test_approve_lets_the_downstream_run_and_records_what_was_shown() -> None:
    with answer_in_process("approvals_approve", "approve", "Approve") as approval:
        run = _dag("approvals_approve").test()
    assert run.state == "success"
    assert _states(run) == {"plan": "success", "approve": "success", "change": "success", "report": "success"}
    assert approval.answered and approval.run_id == run.run_id
    assert approval.subject == "Approve the plan?" and approval.options == ["Approve", "Reject"]
    assert approval.body is not None and "| records | 3 |" in approval.body
    assert approval.answer["chosen_options"] == ["Approve"]
    recorded = _report(run)
    assert recorded is not None and (recorded["verdict"], recorded["chosen_options"]) == ("approved", ["Approve"])


def test_reject_skips_the_downstream_and_the_all_done_report_still_runs() -> None:
    with answer_in_process("approvals_reject", "approve", "Reject") as approval:
        run = _dag("approvals_reject").test()
    assert _states(run) == {"plan": "success", "approve": "success", "change": "skipped", "report": "success"}
    assert approval.answered and approval.answer["chosen_options"] == ["Reject"]
    recorded = _report(run)  # the base operator pushes nothing on Reject: the recorded answer is what tells it
    assert recorded is not None and (recorded["verdict"], recorded["chosen_options"]) == ("rejected", ["Reject"])
    assert recorded["responded_by"] == "admin" and recorded["responded_at"]


def test_a_refused_answer_fails_the_asking_task_instead_of_leaving_dag_test_waiting() -> None:
    with pytest.raises(AssertionError, match=r"refused \(HTTP 400\)"),  \
            answer_in_process("approvals_refused", "approve", "Maybe") as approval:
        run = _dag("approvals_refused").test()
    assert approval.run_id == run.run_id  # the run ended: the asking task was failed for it
    states = _states(run)
    assert states["approve"] == "failed" and states["change"] == "upstream_failed" and states["report"] == "success"
    assert _report(run) is None  # no answer was received: none is recorded
