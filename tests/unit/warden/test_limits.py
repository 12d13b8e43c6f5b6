"""The progress limit: the start-up grace until a process's first batch, then the largest of 3 x trigger, the
floor and 3 x the p99 batch of the last hour."""

from __future__ import annotations

from streamwarden.runfiles.heartbeat import Heartbeat
from streamwarden.warden.limits import progress_limit
from streamwarden.warden.settings import load_warden_settings

WARDEN = load_warden_settings(heartbeat_floor=30, startup_grace=240)


def _beat(batch_id: int | None, trigger: float | None = 5.0, p99_ms: int | None = None) -> Heartbeat:
    return Heartbeat("progress" if batch_id is not None else "started", "q", "r", 1, batch_id=batch_id,
                     trigger_interval_s=trigger, batch_p99_ms=p99_ms)


def test_the_first_batch_of_a_process_gets_the_startup_grace() -> None:
    limit = progress_limit(_beat(None, p99_ms=900_000), 5.0, WARDEN)
    assert (limit.seconds, limit.first_batch) == (240, True)
    assert "first batch pending" in limit.describe()


def test_after_it_the_largest_of_trigger_floor_and_p99_wins() -> None:
    assert progress_limit(_beat(3), 5.0, WARDEN).describe() == "30s (floor)"
    assert progress_limit(_beat(3, trigger=20.0), 5.0, WARDEN).describe() == "60s (3 x trigger)"
    assert progress_limit(_beat(3, trigger=None), 40.0, WARDEN).describe() == "120s (3 x trigger)", \
        "the stream's own trigger when the heartbeat does not carry one"
    slow = progress_limit(_beat(3, p99_ms=25_500), 5.0, WARDEN)
    assert (slow.seconds, slow.basis, slow.first_batch) == (76.5, "3 x p99 batch of the last hour", False)
    assert progress_limit(_beat(3, p99_ms=2_000), 5.0, WARDEN).seconds == 30, "fast batches keep the floor"
