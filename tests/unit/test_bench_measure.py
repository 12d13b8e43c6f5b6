"""The benchmark's memory sampler: RSS at every sample, PSS (a walk of every page) only at every few."""

from __future__ import annotations

import time
from typing import Any

import psutil
from streamwarden_bench.measure import PeakRss


class CountedProcess(psutil.Process):
    """This process, counting how often its PSS is read."""

    full_reads = 0

    def memory_full_info(self) -> Any:
        self.full_reads += 1
        return super().memory_full_info()


def test_the_sampler_reads_pss_at_every_fourth_sample_and_reports_both_peaks() -> None:
    process = CountedProcess()
    with PeakRss(lambda: [process], interval=0.01, pss_every=4) as sampler:
        while sampler.samples < 40:
            time.sleep(0.01)
    samples = sampler.samples
    assert samples >= 40
    assert process.full_reads == (samples + 3) // 4  # samples 0, 4, 8, ...
    assert 0 < sampler.peak_pss_mib <= sampler.peak_mib  # the PSS of a sample is never above its RSS
