"""Hooks: how Airflow reaches the stream."""

from streamwarden_airflow.hooks.stream import StreamwardenHook

__all__ = ["StreamwardenHook"]
