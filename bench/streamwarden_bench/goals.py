"""The stateful-throughput goals (docs/benchmarks.md) checked against one run's results: figure, target, met.

Each goal reads the figure the run measured; one the run did not measure (a phase or case skipped, an engine
that failed or gave a wrong answer) is listed as not measured, never as met::

    for goal in check_goals(results):
        print(goal.name, goal.figure, goal.met)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from streamwarden.settings import parse_duration

MIB_LIMIT = 3 * 1024
"""Peak RSS allowed, MiB."""
BATCH_LIMIT = 100_000
"""The largest batch (records) of the small-batch goal."""


@dataclass(frozen=True)
class Goal:
    """One goal: what it asks, the run's figure (None: not measured) and whether the figure meets it."""

    name: str
    target: str
    figure: float | None
    shown: str  # the figure as a person reads it, with what it came from

    @property
    def met(self) -> bool | None:
        return None if self.figure is None else _TESTS[self.name](self.figure)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "met": self.met}


_TESTS: dict[str, Callable[[float], bool]] = {
    "throughput, default run": lambda x: x >= 0.5,
    "vs Quix, default run": lambda x: x >= 2.0,
    f"throughput, batches <= {BATCH_LIMIT:,}": lambda x: x >= 0.5,
    f"vs Quix, batches <= {BATCH_LIMIT:,}": lambda x: x >= 2.0,
    "fixed cost per batch": lambda s: s <= 0.5,
    "200k sessions": lambda x: x >= 0.25,
    "60 topics": lambda x: x >= 0.3,
    "p95 latency at half load": lambda slack: slack <= 0.0,
    "cold start": lambda s: s <= 25.0,
    "restart after kill -9": lambda s: s <= 30.0,
    "peak RSS, default run": lambda mib: mib <= MIB_LIMIT,
    "RSS flat from 200 to 200k sessions": lambda growth: growth <= 0.10,
}


def check_goals(results: dict[str, Any]) -> list[Goal]:
    """Every goal with this run's figure."""
    main = results["main"]
    stream = main.get("streamwarden") or {}
    scaling = {(c["axis"], c["value"]): c for c in results.get("scaling", [])}
    small = next((c for (axis, value), c in sorted(scaling.items()) if axis == "batch" and value <= BATCH_LIMIT),
                 None)
    small_cap = ((small or {}).get("streamwarden") or {}).get("max_offsets_per_trigger")
    fixed = (stream.get("fixed_cost") or {}).get("duration_s") or {}
    latency = stream.get("latency_s") or {}
    trigger = parse_duration(str(results.get("meta", {}).get("options", {}).get("trigger") or "5s"))
    p95 = latency.get("p95")
    rss = {n: ((scaling.get(("sessions", n)) or {}).get("streamwarden") or {}).get("peak_rss_mib")
           for n in (200, 200_000)}
    growth = rss[200_000] / rss[200] - 1 if rss[200] and rss[200_000] else None

    def ratio(name: str, target: str, case: dict[str, Any] | None, key: str, note: str = "") -> Goal:
        value = None if case is None else (case.get("ratios") or {}).get(key)
        return Goal(name, target, value, ("-" if value is None else f"{value:.3f}x") + note)

    base, quix = "streamwarden_vs_baseline", "streamwarden_vs_quix"
    return [
        ratio("throughput, default run", ">= 0.5x the baseline", main, base),
        ratio("vs Quix, default run", ">= 2x Quix", main, quix),
        ratio(f"throughput, batches <= {BATCH_LIMIT:,}", ">= 0.5x the baseline", small, base,
              f" (batches of {small_cap or '-'} records)"),
        ratio(f"vs Quix, batches <= {BATCH_LIMIT:,}", ">= 2x Quix", small, quix),
        Goal("fixed cost per batch", "<= 0.5 s (p50 of a trickle's batches)", fixed.get("p50"),
             _s(fixed.get("p50"))),
        ratio("200k sessions", ">= 0.25x the baseline", scaling.get(("sessions", 200_000)), base),
        ratio("60 topics", ">= 0.3x the baseline", scaling.get(("topics", 60)), base),
        Goal("p95 latency at half load", f"<= trigger + 2 s = {trigger + 2:g} s",
             None if p95 is None else round(p95 - trigger - 2, 3), _s(p95)),
        Goal("cold start", "<= 25 s", stream.get("cold_start_s"), _s(stream.get("cold_start_s"))),
        Goal("restart after kill -9", "<= 30 s", stream.get("restart_s"), _s(stream.get("restart_s"))),
        Goal("peak RSS, default run", f"<= {MIB_LIMIT:,} MiB", stream.get("peak_rss_mib"),
             "-" if stream.get("peak_rss_mib") is None else f"{stream['peak_rss_mib']:,.0f} MiB"),
        Goal("RSS flat from 200 to 200k sessions", "within 10%", None if growth is None else round(growth, 3),
             "-" if growth is None else f"{rss[200]:,.0f} -> {rss[200_000]:,.0f} MiB ({growth:+.0%})"),
    ]


def goal_lines(goals: list[Goal]) -> list[str]:
    """The goals as a markdown table."""
    lines = ["| goal | target | this run | met |", "| --- | --- | --- | --- |"]
    for goal in goals:
        met = {True: "yes", False: "no", None: "not measured"}[goal.met]
        lines.append(f"| {goal.name} | {goal.target} | {goal.shown} | {met} |")
    return lines


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:g} s"
