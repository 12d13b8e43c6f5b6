"""Operators: one step of the stream's lifecycle each."""

from streamwarden_airflow.operators.stream import (
    StartStreamOperator,
    StopStreamOperator,
    StreamStatusOperator,
)

__all__ = ["StartStreamOperator", "StopStreamOperator", "StreamStatusOperator"]
