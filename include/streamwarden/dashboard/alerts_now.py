"""The last alerts (``run/alerts.jsonl``) with the DAG their next action names and the Params it gives."""

from __future__ import annotations

import json
import re
from typing import Any

from streamwarden.dashboard.model import AlertNow, DagAction

DAGS = ("recover_stream", "stream_supervisor", "validate_output", "maintain_tables", "restart_sessions",
        "upgrade_stream")
"""The DAGs a next action may name, the ones that mend things first."""
_DAG = re.compile(r"\b(" + "|".join(DAGS) + r")\b")
_PARAMS = re.compile(r"\s*(?:with\s+Params\s+)?(?=\{)")
_FORCE = re.compile(r"\s*with\s+force_restart\s*=\s*true\b")


def dag_actions(next_action: str) -> list[DagAction]:
    """Every DAG the text names, in order, each with the JSON Params written right after it
    (``recover_stream with Params {...}``, ``recover_stream {...}``) when there are; ``stream_supervisor with
    force_restart=true`` gives ``{"force_restart": true}``. A DAG named twice is kept once, with Params if any
    mention has them."""
    found: dict[str, dict[str, Any] | None] = {}
    for named in _DAG.finditer(next_action):
        dag_id, rest = named.group(1), next_action[named.end():]
        params: Any = None
        given = _PARAMS.match(rest)
        if given is not None:
            try:
                params, _ = json.JSONDecoder().raw_decode(rest[given.end():])
            except ValueError:
                params = None
        elif dag_id == "stream_supervisor" and _FORCE.match(rest):
            params = {"force_restart": True}
        if found.get(dag_id) is None:
            found[dag_id] = params if isinstance(params, dict) else None
    return [DagAction(dag_id, params) for dag_id, params in found.items()]


def alerts_now(recorded: list[dict[str, Any]], limit: int = 10) -> list[AlertNow]:
    """The newest ``limit`` alerts, newest first."""
    found = []
    for alert in reversed(recorded[-limit:]):
        next_action = str(alert.get("next_action") or "")
        found.append(AlertNow(str(alert.get("raised_at") or ""), str(alert.get("severity") or ""),
                              str(alert.get("summary") or ""), next_action, str(alert.get("source") or ""),
                              dag_actions(next_action)))
    return found
