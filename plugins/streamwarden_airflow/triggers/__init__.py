"""Triggers: run in Airflow's triggerer, watching without a worker slot."""

from streamwarden_airflow.triggers.watch import StreamWatchTrigger, stream_watch_asset

__all__ = ["StreamWatchTrigger", "stream_watch_asset"]
