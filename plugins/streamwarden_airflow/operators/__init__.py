"""Operators: one step of the warden each (check, decide, restart, keep a standby, alert)."""

from streamwarden_airflow.operators.stream import (
    AlertOperator,
    CheckHealthOperator,
    DecideOperator,
    KeepStandbyOperator,
    RestartStreamOperator,
)

__all__ = ["AlertOperator", "CheckHealthOperator", "DecideOperator", "KeepStandbyOperator", "RestartStreamOperator"]
