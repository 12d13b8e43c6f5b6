"""Operators: one step of the warden each (check, decide, restart, alert)."""

from streamwarden_airflow.operators.stream import (
    AlertOperator,
    CheckHealthOperator,
    DecideOperator,
    RestartStreamOperator,
)

__all__ = ["AlertOperator", "CheckHealthOperator", "DecideOperator", "RestartStreamOperator"]
