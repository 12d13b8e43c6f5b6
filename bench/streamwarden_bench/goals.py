"""The performance goals (docs/benchmarks.md) checked against one run's results: figure, target, met.

Each goal reads the figure the run measured; one the run did not measure (a phase or case skipped, an engine
that failed or gave a wrong answer) is listed as not measured, never as met::

    for goal in check_goals(results):
        print(goal.name, goal.figure, goal.met)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from streamwarden.settings_loading import parse_duration

MIB_LIMIT = 2 * 1024
"""Peak RSS of the active stream allowed, MiB."""
MANY_SESSIONS = 200_000
"""The sessions of the scaling case with a goal of its own (every other case is held to :data:`SHAPE_RATIO`)."""
DEFAULT_RATIO, DEFAULT_VS_QUIX = 0.8, 3.0
SHAPE_RATIO, SHAPE_VS_QUIX = 0.7, 2.5
MANY_SESSIONS_RATIO = 0.4
FLOOR_MARGIN_S = 0.15
"""How far above Spark's own floor (:mod:`.floor`, same run) the fixed cost per batch may be."""
LATENCY_MARGIN_S = 1.0
COLD_START_S = 15.0
RESTART_S = 20.0
"""kill -9 to the next committed batch, healed by a new process."""
TAKEOVER_S = 10.0
"""kill -9 to the next committed batch, healed by the warm standby: every kill's, the slowest counts."""
RSS_GROWTH = 0.10


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

    @property
    def margin(self) -> str:
        """How far the figure is from the limit, in the figure's unit, the good side positive."""
        if self.figure is None:
            return "-"
        return f"{(self.limit - self.figure if self.at_most else self.figure - self.limit):+.3g}"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "met": self.met, "margin": self.margin}


def case_label(case: dict[str, Any]) -> str:
    """A scaling case as the goals and tables name it: ``sessions = 20,000``, ``message bytes = 4,096``."""
    return f"{case['axis'].replace('_', ' ')} = {case['value']:,}"


def _ratio(name: str, limit: float, versus: str, case: dict[str, Any] | None, note: str = "") -> Goal:
    key = "streamwarden_vs_quix" if versus == "Quix" else "streamwarden_vs_baseline"
    value = None if case is None else (case.get("ratios") or {}).get(key)
    shown = ("-" if value is None else f"{value:.3f}x") + note
    return Goal(name, f">= {limit:g}x {versus}", limit, False, value, shown)


def _seconds(name: str, limit: float, figure: float | None, target: str = "", note: str = "") -> Goal:
    shown = "-" if figure is None else f"{figure:g} s{note}"
    return Goal(name, target or f"<= {limit:g} s", limit, True, figure, shown)


def _shapes(scaling: list[dict[str, Any]]) -> list[Goal]:
    """Every scaling case against the baseline and the peer; 200k sessions has its own lower bar."""
    if not scaling:
        return [_ratio("throughput, every other shape", SHAPE_RATIO, "the baseline", None),
                _ratio("vs Quix, every other shape", SHAPE_VS_QUIX, "Quix", None)]
    goals = []
    for case in scaling:
        many = (case["axis"], case["value"]) == ("sessions", MANY_SESSIONS)
        label = case_label(case)
        cap = (case.get("streamwarden") or {}).get("max_offsets_per_trigger")
        note = f" (batches of {cap:,} records)" if case["axis"] == "batch" and cap else ""
        goals.append(_ratio(f"throughput, {label}", MANY_SESSIONS_RATIO if many else SHAPE_RATIO, "the baseline",
                            case, note))
        goals.append(_ratio(f"vs Quix, {label}", SHAPE_VS_QUIX, "Quix", case))
    return goals


def _fixed_cost(stream: dict[str, Any]) -> Goal:
    fixed = stream.get("fixed_cost") or {}
    figure = (fixed.get("duration_s") or {}).get("p50")
    floor = ((fixed.get("spark_floor") or {}).get("duration_s") or {}).get("p50")
    target = f"<= Spark's floor + {FLOOR_MARGIN_S:g} s (p50 of a trickle's batches)"
    if floor is None:  # no floor measured: the limit is unknown
        shown = "-" if figure is None else f"{figure:g} s, no floor"
        return Goal("fixed cost per batch", target, 0.0, True, None, shown)
    limit = round(floor + FLOOR_MARGIN_S, 3)
    return _seconds("fixed cost per batch", limit, figure, f"{target} = {limit:g} s", f" (Spark's floor {floor:g} s)")


def _takeover(standby: dict[str, Any]) -> Goal:
    batch = ((standby.get("summary") or {}).get("standby") or {}).get("next_batch_s") or {}
    kills = ((standby.get("summary") or {}).get("standby") or {}).get("kills")
    verified = (standby.get("verified") or {})
    good = bool(verified.get("exactly_once") and verified.get("sessions_exact"))
    figure = batch.get("max") if good else None
    shown = "-" if not batch else (f"max {batch['max']:g} s, p50 {batch['p50']:g} s over {kills} kills"
                                   + ("" if good else " (output NOT verified: no figure)"))
    return Goal("kill -9 to the next batch, warm standby", f"<= {TAKEOVER_S:g} s, every kill", TAKEOVER_S, True,
                figure, shown)


def _rss(stream: dict[str, Any], standby: dict[str, Any]) -> Goal:
    peak = stream.get("peak_rss_mib")
    beside = (standby.get("standby_rss_mib") or {}).get("max")
    note = "" if beside is None else f"; the waiting standby's own {beside:,.0f} MiB beside it"
    return Goal("peak RSS, default run", f"<= {MIB_LIMIT:,} MiB (the active stream)", MIB_LIMIT, True, peak,
                "-" if peak is None else f"{peak:,.0f} MiB{note}")


def check_goals(results: dict[str, Any]) -> list[Goal]:
    """Every goal with this run's figure."""
    main = results["main"]
    stream = main.get("streamwarden") or {}
    standby = results.get("standby") or {}
    scaling = [c for c in results.get("scaling", []) if "axis" in c]
    by_key = {(c["axis"], c["value"]): c for c in scaling}
    trigger = parse_duration(str(results.get("meta", {}).get("options", {}).get("trigger") or "3s"))
    rss = {n: ((by_key.get(("sessions", n)) or {}).get("streamwarden") or {}).get("peak_rss_mib")
           for n in (200, MANY_SESSIONS)}
    growth = rss[MANY_SESSIONS] / rss[200] - 1 if rss[200] and rss[MANY_SESSIONS] else None
    return [
        _ratio("throughput, default run", DEFAULT_RATIO, "the baseline", main),
        _ratio("vs Quix, default run", DEFAULT_VS_QUIX, "Quix", main),
        *_shapes(scaling),
        _fixed_cost(stream),
        _seconds("p95 latency at half load", trigger + LATENCY_MARGIN_S, (stream.get("latency_s") or {}).get("p95"),
                 f"<= trigger + {LATENCY_MARGIN_S:g} s = {trigger + LATENCY_MARGIN_S:g} s"),
        _seconds("cold start", COLD_START_S, stream.get("cold_start_s")),
        _seconds("kill -9 to the next batch, new process", RESTART_S, stream.get("restart_s")),
        _takeover(standby),
        _rss(stream, standby),
        Goal("RSS flat from 200 to 200k sessions", f"within {RSS_GROWTH:.0%}", RSS_GROWTH, True,
             None if growth is None else round(growth, 3),
             "-" if growth is None else f"{rss[200]:,.0f} -> {rss[MANY_SESSIONS]:,.0f} MiB ({growth:+.0%})"),
    ]


def goal_lines(goals: list[Goal]) -> list[str]:
    """The goals as a markdown table, with the margin of each."""
    lines = ["| goal | target | this run | margin | met |", "| --- | --- | --- | --- | --- |"]
    for goal in goals:
        met = {True: "yes", False: "no", None: "not measured"}[goal.met]
        lines.append(f"| {goal.name} | {goal.target} | {goal.shown} | {goal.margin} | {met} |")
    return lines
