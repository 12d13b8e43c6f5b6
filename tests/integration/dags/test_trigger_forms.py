"""Every DAG's Params pass the UI's trigger form with their defaults.

The form (Airflow 3.3's ``FlexibleForm``) treats a Param as required unless its type allows null, and flags a
required field whose value is empty; its text field turns an emptied string into null. So a Param that may be
left empty is typed ``["null", ...]`` with a null default, and every default validates against its own schema
(what the REST API and ``dag.test()`` check). A real browser drives the form in the page's end-to-end tests.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest

from fixtures import REPO

DAGS = ("stream_supervisor", "maintain_tables", "validate_output", "restart_sessions", "recover_stream",
        "upgrade_stream")


@functools.cache
def _dags() -> dict[str, Any]:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert bag.import_errors == {}
    return bag.dags


def _required_by_the_form(schema: dict[str, Any]) -> bool:
    kind = schema.get("type")
    return bool(kind) and (not isinstance(kind, list) or "null" not in kind)


@pytest.mark.parametrize("dag_id", DAGS)
def test_the_form_accepts_every_default_and_requires_no_empty_field(dag_id: str) -> None:
    dag = _dags()[dag_id]
    for name in dag.params:
        param = dag.params.get_param(name)
        param.resolve()  # the default validates against the Param's own schema
        empty = param.value is None or param.value == ""
        assert not (_required_by_the_form(param.schema) and empty), (
            f"{dag_id}: Param {name} has an empty default but a type without null: the form would require it")
