"""Burrow's lag rules on windows of observations (oldest first)."""

from __future__ import annotations

import pytest

from streamwarden.warden.lag import LagObservation, LagStatus, evaluate, slide, worst


def window(*rows: tuple[float, int, int, float]) -> list[LagObservation]:
    """(observed_at, committed, high watermark, committed_at) per observation."""
    return [LagObservation(*row) for row in rows]


@pytest.mark.parametrize(("observations", "now", "status"), [
    # any zero lag in the window: OK, even with the offset still afterwards
    (window((0, 10, 10, 0), (60, 10, 50, 0), (120, 10, 90, 0)), 120, LagStatus.OK),
    # offsets move and the lag shrinks at least once: OK
    (window((0, 10, 100, 0), (60, 80, 120, 59), (120, 150, 160, 119)), 120, LagStatus.OK),
    # offsets move but the lag never shrinks over the full window: falling behind
    (window((0, 10, 100, 0), (60, 40, 140, 59), (120, 70, 180, 119)), 120, LagStatus.WARN),
    # the committed offset went backwards: rewind
    (window((0, 50, 100, 0), (60, 40, 100, 59)), 60, LagStatus.ERR),
    # committed beyond the log end (topic recreated)
    (window((0, 500, 100, 0),), 0, LagStatus.ERR),
    # data waits and nothing was committed since before the window: stopped
    (window((0, 10, 100, 5), (60, 10, 100, 5), (120, 10, 130, 5)), 120, LagStatus.STOP),
    # commits recorded within the window but the offset did not move, lag grows: stalled
    (window((0, 10, 100, 0), (60, 10, 100, 100), (120, 10, 130, 118)), 120, LagStatus.STALL),
    # commits stopped for longer than the window's commits span while lag stays: stopped
    (window((0, 10, 100, 0), (60, 40, 130, 10), (120, 70, 160, 20)), 120, LagStatus.STOP),
    # a single observation cannot show a trend
    (window((0, 10, 100, 0),), 0, LagStatus.OK),
])
def test_burrow_rules(observations: list[LagObservation], now: float, status: LagStatus) -> None:
    assert evaluate(observations, now, size=3) is status


def test_a_lag_that_grew_between_fewer_checks_than_the_window_is_not_yet_falling_behind() -> None:
    growing = window((0, 10, 100, 0), (60, 40, 140, 59), (120, 70, 180, 119))
    assert evaluate(growing[:2], 60, size=3) is LagStatus.OK  # two checks: when they fell between batches
    assert evaluate(growing, 120, size=10) is LagStatus.OK
    assert evaluate(growing, 120, size=3) is LagStatus.WARN
    stalled = window((0, 10, 100, 0), (60, 10, 100, 100))
    assert evaluate(stalled, 60, size=10) is LagStatus.STALL  # a stall is judged on what the window holds


def test_window_slides_and_worst_status() -> None:
    observations: list[LagObservation] = []
    for i in range(5):
        observations = slide(observations, LagObservation(i, i, i, i), size=3)
    assert [o.observed_at for o in observations] == [2, 3, 4]
    assert LagObservation.from_json(observations[0].to_json()) == observations[0]
    assert worst([LagStatus.OK, LagStatus.STOP, LagStatus.WARN]) is LagStatus.STOP
    assert worst([]) is LagStatus.OK


def test_a_window_keeps_only_the_checks_of_its_start() -> None:
    before = [LagObservation(0, 10, 100, 0, start=1.0), LagObservation(60, 10, 100, 0, start=1.0)]
    after = slide(before, LagObservation(120, 10, 100, 0, start=2.0), size=10)
    assert [o.start for o in after] == [2.0], "a restarted stream is not judged by its predecessor's offsets"
    assert evaluate(after, 120, size=10) is LagStatus.OK
    assert LagObservation.from_json([0, 1, 2, 3]) == LagObservation(0, 1, 2, 3, 0.0), "rows kept before starts"
    assert worst([LagStatus.OK, LagStatus.STARTING]) is LagStatus.STARTING
    assert worst([LagStatus.STARTING, LagStatus.WARN]) is LagStatus.WARN
