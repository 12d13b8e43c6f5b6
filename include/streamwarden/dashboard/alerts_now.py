"""The last alerts (``run/alerts.jsonl``) with the DAG their next action names and the Params it gives."""

from __future__ import annotations

import json
import re
from typing import Any

from streamwarden.dashboard.model import AlertNow

DAGS = ("recover_stream", "stream_supervisor", "validate_output", "maintain_tables", "restart_sessions",
        "upgrade_stream")
"""The DAGs a next action may name, the ones that mend things first."""
_DAG = re.compile(r"\b(" + "|".join(DAGS) + r")\b")
_PARAMS = re.compile(r"\bParams\s+(?=\{)")
_FORCE = re.compile(r"\bforce_restart\s*=\s*true\b")


def dag_and_params(next_action: str) -> tuple[str | None, dict[str, Any] | None]:
    """The first DAG the text names, and the JSON Params written after it (``Params {...}``), if any;
    ``stream_supervisor ... force_restart=true`` gives ``{"force_restart": true}``."""
    named = _DAG.search(next_action)
    if named is None:
        return None, None
    dag_id = named.group(1)
    rest = next_action[named.end():]
    given = _PARAMS.search(rest)
    if given is not None:
        try:
            params, _ = json.JSONDecoder().raw_decode(rest[given.end():])
        except ValueError:
            params = None
        if isinstance(params, dict):
            return dag_id, params
    if dag_id == "stream_supervisor" and _FORCE.search(rest):
        return dag_id, {"force_restart": True}
    return dag_id, None


def alerts_now(recorded: list[dict[str, Any]], limit: int = 10) -> list[AlertNow]:
    """The newest ``limit`` alerts, newest first."""
    found = []
    for alert in reversed(recorded[-limit:]):
        next_action = str(alert.get("next_action") or "")
        dag_id, params = dag_and_params(next_action)
        found.append(AlertNow(str(alert.get("raised_at") or ""), str(alert.get("severity") or ""),
                              str(alert.get("summary") or ""), next_action, str(alert.get("source") or ""),
                              dag_id, params))
    return found
