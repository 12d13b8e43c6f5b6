"""What the supervisor DAG will do about a stream that stopped, in ``up``'s words.

``up`` sees the stream stop before the supervisor's next run judges it, so it tells the person what that
run will decide, by the warden's own rules (:func:`streamwarden.warden.decision.decide`) on the run files:
a restart (now, or after the backoff) for a stream that died or failed with ENVIRONMENT; an escalation,
with the action a person takes, for any other failure class or an open circuit breaker; nothing while a
recovery or an upgrade holds it, or while the supervisor DAG is paused.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from streamwarden.runfiles.failure_file import read_failure
from streamwarden.runfiles.hold import read_hold
from streamwarden.settings import Settings
from streamwarden.warden.decision import Action, decide
from streamwarden.warden.health import HealthVerdict, Overall
from streamwarden.warden.restart_policy import load_history
from streamwarden.warden.settings import WardenSettings


def supervisor_forecast(settings: Settings, warden: WardenSettings, *, paused: bool, dag_id: str,
                        now: float | None = None) -> str:
    """``stream stopped (<why>); <what the supervisor does next>``."""
    now = time.time() if now is None else now
    failure = read_failure(settings.run_paths.failure)
    cause = (f"failed with {failure.failure_class.value}: {failure.message}" if failure is not None
             else "no failure recorded")
    if paused:
        return (f"stream stopped ({cause}); {dag_id} is paused, so nothing restarts it: unpause it, or trigger it "
                "with force_restart=true")
    checked_at = datetime.fromtimestamp(now, UTC).isoformat()
    verdict = (HealthVerdict(Overall.FAILED, [cause], checked_at, failure=failure) if failure is not None
               else HealthVerdict(Overall.DEAD, [cause], checked_at))
    decision = decide(verdict, load_history(settings), warden, now, hold=read_hold(settings))
    if decision.action is Action.RESTART:
        when = ("at once" if decision.wait_until is None
                else f"after its backoff, at {datetime.fromtimestamp(decision.wait_until, UTC):%H:%M:%S} UTC")
        return f"stream stopped ({cause}); {dag_id} restarts it {when}"
    if decision.action is Action.ESCALATE:
        return (f"stream stopped ({cause}); {dag_id} will NOT restart it: it escalates ({decision.reason}). "
                f"Next: {decision.next_action}")
    return f"stream stopped ({cause}); {dag_id} leaves it: {decision.reason}. Next: {decision.next_action}"
