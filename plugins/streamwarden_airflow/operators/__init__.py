"""Operators: one step of the warden each (decide, restart, alert)."""

from streamwarden_airflow.operators.stream import AlertOperator, DecideOperator, RestartStreamOperator

__all__ = ["AlertOperator", "DecideOperator", "RestartStreamOperator"]
