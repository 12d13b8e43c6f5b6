"""Which of a cold start's first batches the benchmark leaves out of the steady rate."""

from __future__ import annotations

import pytest
from streamwarden_bench.stream import warm_up_batches


@pytest.mark.parametrize(("rows", "warm_up"), [
    ([50_000, 500_000, 500_000, 500_000, 450_000], 2),  # a limited first batch: the first full one is cold too
    ([500_000, 500_000, 500_000, 200_000], 1),  # a first batch of full size: only it
    ([50_000, 500_000], 1),  # nothing would be left to measure after two
    ([50_000], 1),
    ([], 0),
])
def test_the_first_batch_and_after_a_limited_one_the_first_full_one_are_warm_up(rows: list[int],
                                                                                  warm_up: int) -> None:
    assert warm_up_batches(rows) == warm_up
