"""The soak's plan: a pure function of the seed, at the rate asked, inside its window."""

from __future__ import annotations

from collections import Counter

from streamwarden_soak.plan import FaultKind, fault_plan, workload_plan


def test_the_same_seed_replays_the_same_plan() -> None:
    first = fault_plan(7, 300, 3300, 80) + workload_plan(7, 300, 3300)
    again = fault_plan(7, 300, 3300, 80) + workload_plan(7, 300, 3300)
    assert [p.to_json() for p in first] == [p.to_json() for p in again]
    assert [p.to_json() for p in fault_plan(8, 300, 3300, 80)] != [p.to_json() for p in fault_plan(7, 300, 3300, 80)]


def test_faults_arrive_at_the_rate_asked_inside_the_window_with_every_kind() -> None:
    counts = [len(fault_plan(seed, 300, 3300, 80)) for seed in range(40)]
    assert 60 <= sum(counts) / len(counts) <= 73  # 80/h over 50 minutes: 66.7 on average
    plan = fault_plan(1, 300, 3300, 80)
    assert all(300 < p.at_s < 3300 for p in plan)
    assert [p.at_s for p in plan] == sorted(p.at_s for p in plan)
    assert set(Counter(p.kind for p in plan)) == {kind.value for kind in FaultKind}
    assert all(30 <= p.params["pause_s"] <= 90 for p in plan if p.kind == FaultKind.PAUSE_BROKER)


def test_only_the_kinds_asked_are_drawn_and_the_workload_does_not_move_with_the_fault_rate() -> None:
    plan = fault_plan(3, 0, 3600, 200, (FaultKind.KILL_STREAM, FaultKind.MALFORMED_BURST))
    assert {p.kind for p in plan} == {FaultKind.KILL_STREAM, FaultKind.MALFORMED_BURST}
    assert all(p.is_fault for p in plan)
    workload = workload_plan(3, 0, 3600)
    assert not any(p.is_fault for p in workload)
    assert {p.kind for p in workload} == {"burst", "restart_sessions"}


def test_a_rate_of_zero_plans_none_of_that_kind() -> None:
    assert fault_plan(3, 0, 3600, 0) == []
    assert {p.kind for p in workload_plan(3, 0, 3600, bursts_per_hour=0)} == {"restart_sessions"}
    assert workload_plan(3, 0, 3600, bursts_per_hour=0, restarts_per_hour=0) == []
