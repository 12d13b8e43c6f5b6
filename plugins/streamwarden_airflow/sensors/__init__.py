"""Sensors: wait for a judgeable stream, and for the restart backoff, without holding a worker slot."""

from streamwarden_airflow.sensors.stream import BackoffSensor

__all__ = ["BackoffSensor"]
