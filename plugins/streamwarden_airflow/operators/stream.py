"""Lifecycle steps of the stream: read its status, start it, stop it.

Start and stop run in the ``stream_lifecycle`` pool (one slot), so two of them never overlap.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseOperator, Context

from streamwarden.control import LIFECYCLE_POOL
from streamwarden.launcher import StreamAlreadyRunningError
from streamwarden.status import StreamStatus
from streamwarden_airflow.hooks.stream import StreamwardenHook


def format_status(status: StreamStatus) -> str:
    """A two-column table of the status fields a person looks at first."""
    failure = status.last_failure or {}
    rows = [
        ("running", status.running),
        ("pid", status.pid),
        ("heartbeat age (s)", status.heartbeat_age_s),
        ("last batch", status.last_batch_id),
        ("last event", status.last_event),
        ("stop requested", status.stop_requested),
        ("last failure", f"{failure.get('failure_class')} at {failure.get('occurred_at')}: "
                         f"{failure.get('message')}" if failure else None),
    ]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}} | {'-' if value is None else value}" for name, value in rows)


def _reason(context: Context) -> str:
    params = context.get("params") or {}
    return str(params.get("reason") or "scheduled check")


class StreamStatusOperator(BaseOperator):
    """Reads the stream's status (lease, heartbeat, last failure), logs it as a table, returns it as JSON."""

    def execute(self, context: Context) -> dict[str, Any]:
        status = StreamwardenHook().status()
        self.log.info("stream status:\n%s", format_status(status))
        return status.to_json()


class StartStreamOperator(BaseOperator):
    """Starts the stream detached (spark-submit in its own session) and returns once it holds the lease.

    The task ends right after: no slot is held for the stream's lifetime. A stream that is already
    running (for instance started by a concurrent run) is not an error.
    """

    def __init__(self, *, spark_conn_id: str = StreamwardenHook.default_conn_name,
                 lease_timeout: float = 180.0, **kwargs: Any) -> None:
        kwargs.setdefault("pool", LIFECYCLE_POOL)
        super().__init__(**kwargs)
        self.spark_conn_id = spark_conn_id
        self.lease_timeout = lease_timeout

    def execute(self, context: Context) -> dict[str, Any]:
        hook = StreamwardenHook(self.spark_conn_id)
        self.log.info("starting the stream (reason: %s)", _reason(context))
        try:
            pid = hook.start_stream(self.lease_timeout)
        except StreamAlreadyRunningError as exc:
            self.log.info("%s; not starting another", exc)
            return {"started": False, "pid": exc.holder.pid if exc.holder else None}
        self.log.info("the stream runs as pid %d; logs under %s", pid, hook.settings.root("run") / "logs")
        return {"started": True, "pid": pid}


class StopStreamOperator(BaseOperator):
    """Stops the stream: stop marker and drain, then SIGTERM, then SIGKILL to its process group."""

    def __init__(self, *, drain_timeout: float = 120.0, term_timeout: float = 30.0, **kwargs: Any) -> None:
        kwargs.setdefault("pool", LIFECYCLE_POOL)
        super().__init__(**kwargs)
        self.drain_timeout = drain_timeout
        self.term_timeout = term_timeout

    def execute(self, context: Context) -> dict[str, Any]:
        self.log.info("stopping the stream (reason: %s)", _reason(context))
        outcome = StreamwardenHook().stop_stream(self.drain_timeout, self.term_timeout)
        self.log.info("stream stop: %s after %.1fs", outcome.method.value, outcome.seconds)
        return outcome.to_json()
