"""The sensor of a recovery's replay, in reschedule mode: between pokes no worker slot is held."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseSensorOperator, Context, PokeReturnValue

from streamwarden.recovery import steps
from streamwarden.recovery.plan import RecoveryPlan
from streamwarden_airflow.hooks.tables import DeltaTablesHook
from streamwarden_airflow.operators.failing import run_step


class CaughtUpSensor(BaseSensorOperator):
    """Waits until the new checkpoint has committed up to the log end of every partition the plan saw (before
    that, validation would find the tables ahead of the checkpoint). Each poke logs the partitions behind; a
    stream that stopped with a failure document fails it at once, with that failure's class and evidence.

    :param plan_task_id: the task that pushed the executed :class:`~streamwarden.recovery.plan.RecoveryPlan`
    """

    def __init__(self, *, plan_task_id: str, **kwargs: Any) -> None:
        kwargs.setdefault("mode", "reschedule")
        super().__init__(**kwargs)
        self.plan_task_id = plan_task_id

    def poke(self, context: Context) -> PokeReturnValue:
        executed = RecoveryPlan.from_json(context["ti"].xcom_pull(task_ids=self.plan_task_id))
        settings = DeltaTablesHook().settings
        done, behind = run_step(context, lambda: steps.caught_up(settings, executed))
        self.log.info("replay: %s", "caught up" if done else f"{len(behind)} partition(s) behind: "
                      + ", ".join(f"{tp} at {where['committed']} of {where['needed']}"
                                  for tp, where in list(behind.items())[:10]))
        return PokeReturnValue(done, None)
