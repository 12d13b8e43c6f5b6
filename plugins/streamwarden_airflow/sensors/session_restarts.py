"""The sensor of session restarts, in reschedule mode: between pokes no worker slot is held."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, Context, PokeReturnValue

from streamwarden.session_restarts import steps
from streamwarden.session_restarts.plan import RestartPlan
from streamwarden.warden.launcher import running_holder
from streamwarden_airflow.hooks.tables import DeltaTablesHook


class NewSessionsSensor(BaseSensorOperator):
    """Waits until every targeted site's new session is in ``session_rows`` or the last deadline passed, and
    then, for at most the restart settings' ``catch_up``, while the stream has not read a silent site's topic up
    to its deadline (the answer may be there, unread); returns the request ids answered. Each poke logs who
    answered and who is awaited, and says when the stream is not running.

    :param plan_task_id: the task that pushed the :class:`~streamwarden.session_restarts.plan.RestartPlan`
    """

    def __init__(self, *, plan_task_id: str, **kwargs: Any) -> None:
        kwargs.setdefault("mode", "reschedule")
        super().__init__(**kwargs)
        self.plan_task_id = plan_task_id

    def poke(self, context: Context) -> PokeReturnValue:
        plan = RestartPlan.from_json(context["ti"].xcom_pull(task_ids=self.plan_task_id))
        hook = DeltaTablesHook()
        settings = hook.settings
        answers = steps.look(settings, plan)
        now = datetime.now(UTC)
        waiting = [t for t in plan.turns if t.request_id not in answers]
        self.log.info("%d/%d sites opened a new session; awaited: %s", len(answers), len(plan.turns),
                      ", ".join(f"{t.site} (until {t.deadline:%H:%M:%S})" for t in waiting[:10]) or "none")
        if waiting and now < plan.deadline:
            if running_holder(settings) is None:
                self.log.warning("the stream is not running: no answer can reach session_rows until it runs "
                                 "(stream_supervisor starts it)")
            return PokeReturnValue(False)
        # past the last deadline, an answer the stream has not read yet is not the site's silence: wait for it
        catch_up_until = plan.deadline + timedelta(seconds=hook.restarts.catch_up)
        unread = steps.unread(settings, plan, answers, now) if waiting and now < catch_up_until else []
        if unread:
            self.log.info("the stream has not read %s up to the deadline yet; waiting for it until %s UTC",
                          ", ".join(t.site for t in unread[:10]), f"{catch_up_until:%H:%M:%S}")
            return PokeReturnValue(False)
        return PokeReturnValue(True, sorted(answers))
