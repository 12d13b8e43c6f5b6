"""The stateful-throughput goals (docs/benchmarks.md) checked against one run's results: figure, target, met.

Each goal reads the figure the run measured; one the run did not measure (a phase or case skipped, an engine
that failed or gave a wrong answer) is listed as not measured, never as met::

    for goal in check_goals(results):
        print(goal.name, goal.figure, goal.met)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from streamwarden.settings_loading import parse_duration

MIB_LIMIT = 3 * 1024
"""Peak RSS allowed, MiB."""
BATCH_LIMIT = 100_000
"""The largest batch (records) of the small-batch goal."""


@dataclass(frozen=True)
class Goal:
    """One goal: the run's figure (None: not measured) against a limit it must reach (``at_most``: stay under)."""

    name: str
    target: str
    limit: float
    at_most: bool
    figure: float | None
    shown: str  # the figure as a person reads it, with what it came from

    @property
    def met(self) -> bool | None:
        if self.figure is None:
            return None
        return self.figure <= self.limit if self.at_most else self.figure >= self.limit

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "met": self.met}


def check_goals(results: dict[str, Any]) -> list[Goal]:
    """Every goal with this run's figure."""
    main = results["main"]
    stream = main.get("streamwarden") or {}
    scaling = {(c["axis"], c["value"]): c for c in results.get("scaling", [])}
    small = next((c for (axis, value), c in sorted(scaling.items()) if axis == "batch" and value <= BATCH_LIMIT),
                 None)
    small_cap = ((small or {}).get("streamwarden") or {}).get("max_offsets_per_trigger")
    fixed = (stream.get("fixed_cost") or {}).get("duration_s") or {}
    floor = (((stream.get("fixed_cost") or {}).get("spark_floor") or {}).get("duration_s") or {}).get("p50")
    trigger = parse_duration(str(results.get("meta", {}).get("options", {}).get("trigger") or "5s"))
    rss = {n: ((scaling.get(("sessions", n)) or {}).get("streamwarden") or {}).get("peak_rss_mib")
           for n in (200, 200_000)}
    growth = rss[200_000] / rss[200] - 1 if rss[200] and rss[200_000] else None

    def ratio(name: str, limit: float, versus: str, case: dict[str, Any] | None, note: str = "") -> Goal:
        key = "streamwarden_vs_quix" if versus == "Quix" else "streamwarden_vs_baseline"
        value = None if case is None else (case.get("ratios") or {}).get(key)
        return Goal(name, f">= {limit:g}x {versus}", limit, False, value,
                    ("-" if value is None else f"{value:.3f}x") + note)

    def seconds(name: str, limit: float, figure: float | None, target: str = "", note: str = "") -> Goal:
        return Goal(name, target or f"<= {limit:g} s", limit, True, figure,
                    "-" if figure is None else f"{figure:g} s{note}")

    return [
        ratio("throughput, default run", 0.5, "the baseline", main),
        ratio("vs Quix, default run", 2, "Quix", main),
        ratio(f"throughput, batches <= {BATCH_LIMIT:,}", 0.5, "the baseline", small,
              f" (batches of {small_cap or '-'} records)"),
        ratio(f"vs Quix, batches <= {BATCH_LIMIT:,}", 2, "Quix", small),
        seconds("fixed cost per batch", 0.5, fixed.get("p50"), "<= 0.5 s (p50 of a trickle's batches)",
                "" if floor is None else f" (Spark's floor {floor:g} s)"),
        ratio("200k sessions", 0.25, "the baseline", scaling.get(("sessions", 200_000))),
        ratio("60 topics", 0.3, "the baseline", scaling.get(("topics", 60))),
        seconds("p95 latency at half load", trigger + 2, (stream.get("latency_s") or {}).get("p95"),
                f"<= trigger + 2 s = {trigger + 2:g} s"),
        seconds("cold start", 25, stream.get("cold_start_s")),
        seconds("restart after kill -9", 30, stream.get("restart_s")),
        Goal("peak RSS, default run", f"<= {MIB_LIMIT:,} MiB", MIB_LIMIT, True, stream.get("peak_rss_mib"),
             "-" if stream.get("peak_rss_mib") is None else f"{stream['peak_rss_mib']:,.0f} MiB"),
        Goal("RSS flat from 200 to 200k sessions", "within 10%", 0.10, True,
             None if growth is None else round(growth, 3),
             "-" if growth is None else f"{rss[200]:,.0f} -> {rss[200_000]:,.0f} MiB ({growth:+.0%})"),
    ]


def goal_lines(goals: list[Goal]) -> list[str]:
    """The goals as a markdown table."""
    lines = ["| goal | target | this run | met |", "| --- | --- | --- | --- |"]
    for goal in goals:
        met = {True: "yes", False: "no", None: "not measured"}[goal.met]
        lines.append(f"| {goal.name} | {goal.target} | {goal.shown} | {met} |")
    return lines
