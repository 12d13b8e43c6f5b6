"""Sensors of the warden, in reschedule mode by default: between pokes no worker slot is held."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from airflow.sdk import BaseSensorOperator, Context, PokeReturnValue

from streamwarden.warden.health import Overall
from streamwarden_airflow.hooks.stream import StreamwardenHook
from streamwarden_airflow.operators.stream import watch_sighting


class StreamHealthSensor(BaseSensorOperator):
    """Judges the stream's health; waits while it is STARTING, then returns the verdict (JSON, XCom).

    The verdict is logged as a table. The lag history (Burrow's window) is kept only for verdicts that are
    returned, so the pokes of a starting stream do not crowd the window.
    """

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("mode", "reschedule")
        super().__init__(**kwargs)

    def poke(self, context: Context) -> PokeReturnValue:
        sighting = watch_sighting(context)
        if sighting is not None:
            self.log.info("woken by the stream watch: %s", sighting.text())
        hook = StreamwardenHook()
        assessment = hook.assess()
        verdict = assessment.verdict
        self.log.info("stream health:\n%s", verdict.table())
        if verdict.overall is Overall.STARTING:
            return PokeReturnValue(False)
        assessment.commit()
        return PokeReturnValue(True, verdict.to_json())


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
