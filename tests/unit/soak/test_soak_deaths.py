"""Which stream deaths the soak's faults explain: a kill or a hang of the stream, and a broker pause only for a
death classified ENVIRONMENT (a stream starting while the broker does not answer gives up, classified)."""

from __future__ import annotations

from typing import Any

from streamwarden_longrun.analysis import Death
from streamwarden_soak.verdict import DEATH_GRACE_S, unexplained_deaths


def fault(kind: str, began: float, ended: float) -> dict[str, Any]:
    return {"kind": kind, "began_s": began, "ended_s": ended, "injected": True}


def death(at: float, failure_class: str | None) -> Death:
    return Death(pid=int(at), at_s=at, failure_class=failure_class, message="the broker did not answer",
                 heartbeat_age_s=None)


def test_a_broker_pause_explains_an_environment_death_during_it_and_nothing_else() -> None:
    faults = [fault("pause_broker", 1594.0, 1674.4)]
    assert unexplained_deaths([death(1632.0, "ENVIRONMENT"), death(1674.4 + DEATH_GRACE_S - 1, "ENVIRONMENT")],
                              faults) == []
    assert len(unexplained_deaths([death(1632.0, "BUG")], faults)) == 1  # a defect, whatever the broker did
    assert len(unexplained_deaths([death(1674.4 + DEATH_GRACE_S + 5, "ENVIRONMENT")], faults)) == 1


def test_a_kill_explains_a_death_of_any_class_and_an_uninjected_fault_none() -> None:
    faults = [fault("kill_stream", 600.0, 600.0), {**fault("kill_stream", 900.0, 900.0), "injected": False}]
    assert unexplained_deaths([death(601.0, None), death(620.0, "ENVIRONMENT")], faults) == []
    assert unexplained_deaths([death(905.0, None)], faults) == ["pid 905 at 15.1 min (no failure document: the "
                                                                "broker did not answer)"]
