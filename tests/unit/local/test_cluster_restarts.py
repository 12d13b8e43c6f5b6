"""The rehearsal's restarts of a part that died: a backoff that doubles while it keeps dying, reset after a long run."""

from __future__ import annotations

from streamwarden.local.cluster import RESTART_BACKOFF, Restartable

FIRST, LONGEST = RESTART_BACKOFF


def part(started_at: float) -> Restartable:
    return Restartable("airflow-scheduler", start=lambda: None, alive=lambda: False, started_at=started_at)


def test_a_part_that_keeps_dying_waits_twice_as_long_each_time_up_to_the_longest_wait() -> None:
    scheduler = part(started_at=0.0)
    now, waits = 5.0, []
    for _ in range(9):
        assert not scheduler.due(now)  # just seen dead: it waits first
        waits.append(scheduler.wait)
        now += scheduler.wait
        assert scheduler.due(now)
        scheduler.restarted(now)
        now += 2.0  # dies again two seconds after each start (its database is down)
    assert waits == [FIRST, 2, 4, 8, 16, 32, LONGEST, LONGEST, LONGEST]
    assert len(scheduler.restarts) == 9


def test_a_part_that_ran_longer_than_the_longest_wait_is_started_again_after_the_first() -> None:
    scheduler = part(started_at=0.0)
    for _ in range(5):  # a run of quick deaths
        scheduler.due(scheduler.started_at + 1)
        scheduler.restarted(scheduler.started_at + 1 + scheduler.wait)
    assert scheduler.wait > FIRST
    died = scheduler.started_at + LONGEST + 1
    assert not scheduler.due(died) and scheduler.wait == FIRST and scheduler.due(died + FIRST)
