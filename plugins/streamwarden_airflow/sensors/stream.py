"""The warden's sensor, in reschedule mode by default: between pokes no worker slot is held."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from airflow.sdk import BaseSensorOperator, Context

from streamwarden_airflow.hooks.stream import StreamwardenHook


class BackoffSensor(BaseSensorOperator):
    """Waits until the restart backoff has passed (at once for an operator's ``force_restart``)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("mode", "reschedule")
        super().__init__(**kwargs)

    def poke(self, context: Context) -> bool:
        if (context.get("params") or {}).get("force_restart"):
            return True
        hook = StreamwardenHook()
        until = hook.history().backoff_until(time.time(), hook.warden.backoff_base, hook.warden.backoff_max)
        if until is None:
            return True
        self.log.info("restart backoff: waiting until %s", datetime.fromtimestamp(until, UTC).isoformat())
        return False
