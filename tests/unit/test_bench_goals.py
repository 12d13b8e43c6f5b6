"""The benchmark's goals read from a run's results: each figure from where the run measured it, met or not."""

from __future__ import annotations

from typing import Any

from streamwarden_bench.goals import check_goals, goal_lines


def case(axis: str, value: int, x: float, rss: float, *, cap: int = 125_000, quix: float | None = None
         ) -> dict[str, Any]:
    return {"axis": axis, "value": value, "ratios": {"streamwarden_vs_baseline": x, "streamwarden_vs_quix": quix},
            "streamwarden": {"peak_rss_mib": rss, "max_offsets_per_trigger": cap}}


def standby(p50: float, slowest: float, *, exact: bool = True) -> dict[str, Any]:
    return {"summary": {"standby": {"kills": 10, "next_batch_s": {"p50": p50, "max": slowest}}},
            "verified": {"exactly_once": True, "sessions_exact": exact}, "standby_rss_mib": {"p50": 1100.0,
                                                                                            "max": 1210.0}}


def test_each_goal_reads_its_figure_and_the_limits_hold_at_their_edges() -> None:
    results = {
        "meta": {"options": {"trigger": "4s"}},
        "main": {"ratios": {"streamwarden_vs_baseline": 0.8, "streamwarden_vs_quix": 2.99},
                 "streamwarden": {"cold_start_s": 15.0, "restart_s": 20.01, "peak_rss_mib": 2048.0,
                                  "latency_s": {"p95": 5.0},
                                  "fixed_cost": {"duration_s": {"p50": 0.56},
                                                 "spark_floor": {"duration_s": {"p50": 0.4}}}}},
        "standby": standby(8.0, 10.0),
        "scaling": [case("sessions", 200, 0.7, 2000.0, quix=2.5), case("sessions", 200_000, 0.39, 2200.0, quix=3.0),
                    case("message_bytes", 4096, 0.69, 1900.0),
                    case("batch", 100_000, 0.71, 2100.0, cap=100_000, quix=2.49)],
    }
    goals = {g.name: g for g in check_goals(results)}

    assert {n: g.met for n, g in goals.items()} == {
        "throughput, default run": True, "vs Quix, default run": False,
        "throughput, sessions = 200": True, "vs Quix, sessions = 200": True,
        "throughput, sessions = 200,000": False, "vs Quix, sessions = 200,000": True,  # 200k: 0.4x, not 0.7x
        "throughput, message bytes = 4,096": False, "vs Quix, message bytes = 4,096": None,  # no peer: not measured
        "throughput, batch = 100,000": True, "vs Quix, batch = 100,000": False,
        "fixed cost per batch": False,  # 0.56 s against the floor's 0.4 s + 0.15 s
        "p95 latency at half load": True,  # 5 s against the 4 s trigger + 1 s
        "cold start": True, "kill -9 to the next batch, new process": False,
        "kill -9 to the next batch, warm standby": True,  # the slowest kill, 10 s exactly
        "peak RSS, default run": True,
        "RSS flat from 200 to 200k sessions": True,  # +10% exactly
    }
    assert goals["p95 latency at half load"].target == "<= trigger + 1 s = 5 s"
    assert goals["fixed cost per batch"].target.endswith("= 0.55 s")
    assert goals["fixed cost per batch"].shown == "0.56 s (Spark's floor 0.4 s)"
    assert goals["throughput, batch = 100,000"].shown == "0.710x (batches of 100,000 records)"
    assert goals["RSS flat from 200 to 200k sessions"].shown == "2,000 -> 2,200 MiB (+10%)"
    assert goals["kill -9 to the next batch, warm standby"].shown == "max 10 s, p50 8 s over 10 kills"
    assert goals["peak RSS, default run"].shown == "2,048 MiB; the waiting standby's own 1,210 MiB beside it"
    assert goals["throughput, sessions = 200,000"].margin == "-0.01"
    assert "| fixed cost per batch | <= Spark's floor + 0.15 s" in "\n".join(goal_lines(list(goals.values())))


def test_a_takeover_whose_output_was_wrong_gives_no_figure() -> None:
    results = {"main": {"ratios": {}, "streamwarden": {}}, "standby": standby(5.0, 6.0, exact=False)}
    (goal,) = [g for g in check_goals(results) if g.name == "kill -9 to the next batch, warm standby"]
    assert goal.met is None and "NOT verified" in goal.shown


def test_a_goal_the_run_did_not_measure_is_not_met_and_says_so() -> None:
    goals = check_goals({"main": {"ratios": {}, "streamwarden": {}}})
    assert all(g.figure is None and g.met is None and g.to_json()["met"] is None for g in goals)
    assert {g.shown for g in goals} == {"-"}
    assert {"throughput, every other shape", "vs Quix, every other shape"} <= {g.name for g in goals}
