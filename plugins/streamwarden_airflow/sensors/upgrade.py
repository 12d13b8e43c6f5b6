"""The health watch of an upgrade, in reschedule mode: between pokes no worker slot is held."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseSensorOperator, Context, PokeReturnValue

from streamwarden.upgrade import steps
from streamwarden.upgrade.journal import Journal
from streamwarden_airflow.hooks.stream import StreamwardenHook
from streamwarden_airflow.operators.failing import run_step
from streamwarden_airflow.operators.upgrade import checked_request, run_ids


class UpgradeHealthSensor(BaseSensorOperator):
    """Watches the new version with the warden's verdict until it has run healthy for the run's
    ``health_minutes`` (then releases the run's hold and returns the verdict), and fails at once, with the
    verdict and the stream's failure document, when it is FAILED, HUNG or DEAD, or committed no batch while
    records waited; a new version that failed with ENVIRONMENT is started again first (``steps.watch``). Each
    poke logs the verdict as a table.
    """

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("mode", "reschedule")
        super().__init__(**kwargs)

    def poke(self, context: Context) -> PokeReturnValue:
        owner, key = run_ids(context)
        request = checked_request(context)
        hook = StreamwardenHook()
        journal = Journal.open(hook.settings, key)

        def look() -> PokeReturnValue:
            result = steps.watch(hook.settings, hook.warden, journal, minutes=request.health_minutes,
                                 restart=lambda: steps.restart_for_watch(hook.settings, owner=owner,
                                                                         start=hook.start_stream))
            self.log.info("new version: %s\n%s", result.reason, result.verdict.table())
            if result.done and not result.healthy:
                raise steps.unhealthy(result)
            if result.done:
                steps.finish_watch(hook.settings, journal, result, owner=owner)
                return PokeReturnValue(True, result.to_json())
            return PokeReturnValue(False)
        return run_step(context, look)
