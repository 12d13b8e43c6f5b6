"""The session stage's micro-benchmark: every step measured on the records it was given, and its report."""

from __future__ import annotations

from streamwarden_bench.stage_cpu import STEPS, measure, report


def test_every_step_of_the_stage_is_timed_per_record() -> None:
    per_record = measure(3_000, 1)
    assert set(per_record) == set(STEPS)
    assert all(0 < micros < 1_000 for micros in per_record.values())  # the whole pass ran on the 3,000 records


def test_the_report_gives_each_codes_median_and_its_ratio_to_the_first() -> None:
    runs = {"today": [dict.fromkeys(STEPS, 1.0), dict.fromkeys(STEPS, 3.0), dict.fromkeys(STEPS, 2.0)],
            "HEAD~1": [dict.fromkeys(STEPS, 4.0)] * 3}
    text = report(runs, 1_000)
    assert "| today | 2.00 | 2.00 | 2.00 | 2.00 | 2.00 | 10.00 | 1.000 |" in text
    assert "| HEAD~1 | 4.00 | 4.00 | 4.00 | 4.00 | 4.00 | 20.00 | 2.000 |" in text
