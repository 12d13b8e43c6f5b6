"""The results document's summary: ratios to the baseline, a markdown table and the PNG chart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .goals import case_label, check_goals, goal_lines
from .standby import summary_lines

ENGINES = ("baseline", "streamwarden", "quix")


def rate(result: dict[str, Any] | None) -> float | None:
    """The engine's steady-state msg/s, ``None`` when it did not run or was wrong (a wrong answer does not count)."""
    if not result or "msg_per_s" not in result or not result.get("verification", {}).get("ok"):
        return None
    value = result["msg_per_s"]
    return float(value) if value else None


def ratios(case: dict[str, Any]) -> dict[str, float | None]:
    base, stream, quix = (rate(case.get(name)) for name in ENGINES)

    def ratio(a: float | None, b: float | None) -> float | None:
        return round(a / b, 3) if a and b else None

    return {"streamwarden_vs_baseline": ratio(stream, base), "quix_vs_baseline": ratio(quix, base),
            "streamwarden_vs_quix": ratio(stream, quix)}


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if isinstance(value, float | int) and abs(value) >= 100 else str(value)


def markdown(results: dict[str, Any]) -> str:
    """Tables for docs/benchmarks.md: the goals, the main case, then the scaling series."""
    main = results["main"]
    w = main["workload"]
    lines = [f"Workload: {w['messages']:,} messages, {w['topics']} topics x {w['partitions']} partitions, "
             f"{w['sessions']} sessions x {w['rows']} rows, seed {w['seed']}.", "",
             *goal_lines(check_goals(results)), "",
             "| engine | msg/s (steady) | x baseline | peak RSS MiB | peak PSS MiB | verified |",
             "| --- | --- | --- | --- | --- | --- |"]
    base = rate(main.get("baseline"))
    for name in ENGINES:
        result = main.get(name) or {}
        if "msg_per_s" not in result:
            lines.append(f"| {name} | not run: {result.get('skipped', '?')} | | | | |")
            continue
        r = rate(result)
        lines.append(f"| {name} | {_cell(result['msg_per_s'])} | {_cell(round(r / base, 3) if r and base else None)} "
                     f"| {_cell(result.get('peak_rss_mib'))} | {_cell(result.get('peak_pss_mib'))} "
                     f"| {result['verification']['ok']} |")
    stream = main.get("streamwarden", {})
    if "latency_s" in stream:
        lat = stream["latency_s"]
        lines += ["", f"Streamwarden: cold start {stream['cold_start_s']} s to the first committed batch; "
                  f"restart after kill -9 {stream.get('restart_s')} s to the next; end-to-end latency at "
                  f"{lat['target_rate']:,.0f} msg/s (half the steady rate): p50 {lat.get('p50')} s, "
                  f"p95 {lat.get('p95')} s ({lat['records']:,} records)."]
    fixed = stream.get("fixed_cost", {})
    if fixed.get("duration_s"):
        split = ", ".join(f"{k} {v}" for k, v in fixed["durations_ms_per_batch"].items())
        lines.append(f"Fixed cost per batch ({fixed['batches']} batches of ~{fixed['records_p50']:,.0f} records at "
                     f"{fixed['target_rate']:,.0f} msg/s): p50 {fixed['duration_s'].get('p50')} s, p95 "
                     f"{fixed['duration_s'].get('p95')} s, max {fixed['duration_s']['max']} s (ms per batch: {split}).")
        lines += floor_lines(fixed)
    for table, times in sorted(stream.get("delta_commit_ms", {}).items()):
        lines.append(f"Delta commit of a batch to {table} (driver: list files, read footers, commit): "
                     f"p50 {times.get('p50')} ms, p95 {times.get('p95')} ms, max {times['max']} ms "
                     f"({times['commits']} commits).")
    if "sinks" in main:
        lines += ["", *sink_lines(main["sinks"], base)]
    if "standby" in results:
        lines += ["", *standby_lines(results["standby"])]
    if "compaction" in results:
        lines += ["", *compaction_lines(results["compaction"])]
    if "restarts" in results:
        lines += ["", *restart_lines(results["restarts"])]
    if results.get("scaling"):
        lines += ["", "| scaling | messages | baseline msg/s | streamwarden msg/s | x baseline | quix msg/s "
                  "| x quix | RSS MiB baseline / streamwarden / quix | streamwarden PSS MiB |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for case in results["scaling"]:
            rss = " / ".join(_cell((case.get(n) or {}).get("peak_rss_mib")) for n in ENGINES)
            lines.append(f"| {case_label(case)} | {case['workload']['messages']:,} "
                         f"| {_cell(rate(case.get('baseline')))} | {_cell(rate(case.get('streamwarden')))} "
                         f"| {_cell(case['ratios']['streamwarden_vs_baseline'])} | {_cell(rate(case.get('quix')))} "
                         f"| {_cell(case['ratios']['streamwarden_vs_quix'])} "
                         f"| {rss} | {_cell((case.get('streamwarden') or {}).get('peak_pss_mib'))} |")
    return "\n".join(lines) + "\n"


def floor_lines(fixed: dict[str, Any]) -> list[str]:
    """What of the fixed cost is not the job's code: Spark's floor (:mod:`.floor`) and the broker's answers."""
    lines = []
    floor = fixed.get("spark_floor") or {}
    if floor.get("duration_s"):
        split = ", ".join(f"{k} {v}" for k, v in floor["durations_ms_per_batch"].items())
        lines.append(f"Spark's own floor under it (a minimal stateful query on the job's Spark settings, "
                     f"{floor['rows_per_batch']} rows over {floor['keys']} keys, no Kafka, no files, no Delta; "
                     f"{floor['batches']} batches): p50 {floor['duration_s'].get('p50')} s, p95 "
                     f"{floor['duration_s'].get('p95')} s (ms per batch: {split}).")
    elif "error" in floor:
        lines.append(f"Spark's own floor: not measured ({floor['error']}).")
    listed, known = fixed.get("offsets_query_listed_ms") or {}, fixed.get("offsets_query_known_ends_ms") or {}
    if listed and known:
        lines.append(f"The broker's answer to the source's offsets query at a trigger, after the run: every partition "
                     f"listed, then fetched (the first trigger after a start) p50 {listed.get('p50')} ms, p95 "
                     f"{listed.get('p95')} ms; fetched at the ends known from the previous query, nothing new (every "
                     f"later trigger, at its cheapest) p50 {known.get('p50')} ms, p95 {known.get('p95')} ms.")
    return lines


def standby_brief(standby: dict[str, Any]) -> str:
    """One line on the standby phase, for the progress output."""
    if "error" in standby:
        return f"ERROR {standby['error']}"
    batch = standby["summary"]["standby"]["next_batch_s"]
    return (f"next batch after kill -9 p50 {batch.get('p50')} s, max {batch.get('max')} s; "
            f"verified={standby['verified']}")


def standby_lines(standby: dict[str, Any]) -> list[str]:
    """The standby phase: its kills, the standby's RSS, the verdict at rest."""
    if "error" in standby:
        return [f"Warm standby: ERROR {standby['error']}"]
    return [f"Warm standby (`streamwarden_bench.standby` on a stream of its own: session pipeline, 1 s trigger, "
            f"{standby['spec']['rate']:g} msg/s produced meanwhile; kill -9 at a random moment, times from the kill):",
            "", *summary_lines(standby)]


def compaction_lines(c: dict[str, Any]) -> list[str]:
    """Compaction against a plain pyarrow read-and-rewrite of the same files, and vacuum."""
    return [f"Compaction of {c['files']:,} small files ({c['rows']:,} rows, {c['input_mb']} MiB, 4 partitions) "
            f"to {c['files_after']} files:", "",
            "| step | seconds | MB/s | rows/s | x pyarrow rewrite |", "| --- | --- | --- | --- | --- |",
            f"| pyarrow read-and-rewrite (baseline) | {c['baseline_s']} | {c['baseline_mb_per_s']} "
            f"| {_cell(c['baseline_rows_per_s'])} | 1.0 |",
            f"| compaction (delta-rs optimize + commit) | {c['compaction_s']} | {c['compaction_mb_per_s']} "
            f"| {_cell(c['compaction_rows_per_s'])} | {c['ratio_to_baseline']} |",
            f"| compaction and its proof | {round(c['compaction_s'] + c['proof_s'], 3)} "
            f"| {c['compaction_with_proof_mb_per_s']} | {_cell(c['compaction_with_proof_rows_per_s'])} "
            f"| {c['ratio_with_proof']} |", "",
            f"Vacuum of {c['vacuum_files']:,} unreferenced files: {c['vacuum_deleted']:,} deleted in "
            f"{c['vacuum_s']} s."]


_PHASE_NAMES = {"baseline": "steady (no restart)", "jittered": "restart, jittered",
                "between": "steady, between the restarts", "at_once": "restart, all at once"}


def restart_brief(r: dict[str, Any]) -> str:
    """One line on the session restarts benchmark, for the progress output."""
    if "error" in r:
        return f"ERROR {r['error']}"
    return "; ".join(f"{p['name']} max {p['max_s']} s ({p['max_x_trigger']}x trigger)" for p in r["phases"]) + (
        f"; jittered within 3x trigger: {r['verdict_jittered_max_within_3x_trigger']}; "
        f"verified={r['verification']['ok']} {r['verification']['problems'] or ''}")


def _answered_after(phase: dict[str, Any]) -> str:
    """Seconds from the plan to the last answer, and from the last site's turn, of a restart phase."""
    if phase["all_answered_s"] is None:
        return "-"
    return f"{phase['all_answered_s']} ({phase['after_last_turn_s']})"


def restart_lines(r: dict[str, Any]) -> list[str]:
    """The session restarts benchmark: per phase the batch durations against the trigger and the baseline."""
    if "error" in r:
        return [f"Session restarts: ERROR {r['error']}"]
    s = r["spec"]
    lines = [f"Session restarts: {s['sites']} sites ({s['partitions']} partition(s) each) x "
             f"{s['sessions_per_site']} sessions x {s['rows_per_snapshot']} rows per snapshot, {s['rate']:,.0f} msg/s, "
             f"trigger {r['trigger_s']:g} s; load average at the start {r['load_average_at_start'][0]}.", "",
             "| phase | batches | max s | p95 s | max x trigger | p95 x trigger | max x steady | p95 x steady "
             "| largest batch: records / session rows | p50 s: latestOffset / Delta commits | answered "
             "| all answered after s (after the last turn) | load |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for p in r["phases"]:
        name = _PHASE_NAMES.get(p["name"], p["name"])
        if p["jitter_s"] is not None:
            name += f" ({p['jitter_s']:g} s)"
        answered = "-" if p["answered"] is None else f"{p['answered']}/{p['sites']}"
        lines.append(f"| {name} | {p['batches']} | {p['max_s']} | {p['p95_s']} | {_cell(p['max_x_trigger'])} "
                     f"| {_cell(p['p95_x_trigger'])} | {_cell(p['max_x_baseline'])} | {_cell(p['p95_x_baseline'])} "
                     f"| {_cell(p['largest_records'])} / {_cell(p['largest_session_rows'])} "
                     f"| {p['latest_offset_p50_s']} / {p['delta_commit_p50_s']} | {answered} "
                     f"| {_answered_after(p)} | {p['load_average'][0]} |")
    jittered = next(p for p in r["phases"] if p["name"] == "jittered")
    verification = r["verification"]
    lines += ["", f"Jittered restart, longest batch <= 3 x trigger ({3 * r['trigger_s']:g} s): "
              f"**{r['verdict_jittered_max_within_3x_trigger']}** ({jittered['max_s']} s). Batches missed by the "
              f"heartbeat: {len(r['missed_batches'])}. Producer: {r['producer']['restarts']} site restarts acted on, "
              f"{r['producer']['messages']:,} messages. Output verified: {verification['ok']} "
              f"{verification['problems'] or ''}".rstrip() + "."]
    return lines


def sink_lines(sinks: dict[str, Any], base: float | None) -> list[str]:
    """The sink comparison: every run in order, then the medians and their ratios."""
    ref = sinks["ref"]
    names = {"delta": "delta (today)", "ref": f"{ref['ref']}"}
    lines = [f"Sink comparison, alternating on this workload: today's job (Delta sink) and the job of "
             f"{ref['ref']} ({ref['commit'][:12]}: {ref['subject']}).", "",
             "| run | sink | msg/s (steady) | commit to commit msg/s | x baseline | addBatch ms per batch "
             "| Delta commit ms p50 / p95 | load average at start | verified |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for run in sinks["runs"]:
        r = rate(run)
        commit = ", ".join(f"{table} {t.get('p50')} / {t.get('p95')}"
                           for table, t in sorted(run.get("delta_commit_ms", {}).items())) or "-"
        verified = run.get("verification", {}).get("ok", run.get("error", "?"))
        lines.append(f"| {run['repeat']} | {names[run['sink']]} | {_cell(run.get('msg_per_s'))} "
                     f"| {_cell(run.get('commit_to_commit_msg_per_s'))} "
                     f"| {_cell(round(r / base, 3) if r and base else None)} "
                     f"| {_cell(run.get('durations_ms_per_batch', {}).get('addBatch'))} | {commit} "
                     f"| {run['load_average_at_start'][0]} | {verified} |")
    medians, c2c, x_base = sinks["median_msg_per_s"], sinks["median_commit_to_commit_msg_per_s"], sinks["x_baseline"]
    lines += ["", "Medians: " + "; ".join(
        f"{names[s]} {_cell(medians[s])} msg/s ({_cell(x_base[s])} x baseline; commit to commit {_cell(c2c[s])})"
        for s in ("delta", "ref")) + f". Delta / {ref['ref']}: {_cell(sinks['delta_vs_ref'])} "
        f"(within 10%: {sinks['delta_within_10_percent']})."]
    return lines


def chart(results: dict[str, Any], path: Path) -> None:
    """Throughput with ratios to the baseline, Streamwarden's latency, peak RSS; scaling when measured."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    main = results["main"]
    scaling = results.get("scaling") or []
    fig, axes = plt.subplots(1, 4 if scaling else 3, figsize=(18 if scaling else 14, 4.5))
    names = [n for n in ENGINES if rate(main.get(n))]
    base = rate(main.get("baseline"))
    bars = axes[0].bar(names, [rate(main[n]) for n in names], color=["#888", "#1f77b4", "#ff7f0e"][:len(names)])
    for bar, name in zip(bars, names, strict=True):
        r = rate(main[name])
        label = f"{r / base:.2f}x" if r and base else ""
        axes[0].annotate(label, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom")
    axes[0].set_title("steady throughput (msg/s), x baseline")
    lat = main.get("streamwarden", {}).get("latency_s", {})
    axes[1].bar(["p50", "p95"], [lat.get("p50") or 0, lat.get("p95") or 0], color="#1f77b4")
    axes[1].set_title(f"Streamwarden end-to-end latency (s) at {lat.get('target_rate', 0):,.0f} msg/s")
    rss_names = [n for n in ENGINES if (main.get(n) or {}).get("peak_rss_mib")]
    axes[2].bar(rss_names, [main[n]["peak_rss_mib"] for n in rss_names])
    axes[2].set_title("peak RSS (MiB)")
    if scaling:
        for name, style in (("baseline", "o--"), ("streamwarden", "o-"), ("quix", "s:")):
            points = [(f"{c['axis'][0]}={c['value']:,}", rate(c.get(name))) for c in scaling]
            if any(v for _, v in points):
                axes[3].plot([p for p, _ in points], [v or 0 for _, v in points], style, label=name)
        axes[3].set_yscale("log")
        axes[3].set_title("scaling: msg/s, log scale (s=sessions, t=topics, m=message bytes, b=batch cap)")
        axes[3].legend()
        axes[3].tick_params(axis="x", rotation=30)
    fig.suptitle(f"Streamwarden benchmark {results['meta']['date']} on {results['meta']['host']} "
                 "(absolute numbers are noisy; compare ratios)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def restart_chart(r: dict[str, Any], path: Path) -> None:
    """Every batch's duration over the run, coloured by phase, with the trigger and 3x the trigger."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.artist import Artist
    from matplotlib.lines import Line2D
    from matplotlib.patches import Rectangle

    batches = r["batches"]
    if not batches:
        return
    origin = batches[0]["started_at"]
    phases = {p["name"]: p for p in r["phases"]}
    fig, ax = plt.subplots(figsize=(14, 4.5))
    colours = {"baseline": "#2ca02c", "jittered": "#1f77b4", "between": "#98df8a", "at_once": "#d62728"}
    for b in batches:
        phase = next((n for n, p in phases.items() if p["first_batch"] is not None
                      and p["first_batch"] <= b["batch_id"] <= p["last_batch"]), None)
        ax.bar(b["started_at"] - origin, b["duration_s"], width=max(b["duration_s"], 0.5), align="edge",
               color=colours.get(phase or "", "#bbb"), edgecolor="none")
    at = [b["started_at"] - origin + b["duration_s"] / 2 for b in batches]
    ax.plot(at, [b.get("delta_commit_s", 0) for b in batches], color="#000", linewidth=1)
    ax.plot(at, [b.get("latest_offset_s", 0) for b in batches], color="#000", linewidth=1, linestyle=":")
    right = batches[-1]["started_at"] - origin + batches[-1]["duration_s"]
    for level, label in ((r["trigger_s"], "trigger"), (3 * r["trigger_s"], "3 x trigger")):
        ax.axhline(level, color="#555", linestyle="--" if label == "trigger" else "-", linewidth=0.8)
        ax.annotate(label, (right, level), va="bottom", ha="right", fontsize=8)
    handles: list[Artist] = [Rectangle((0, 0), 1, 1, color=c) for c in colours.values()]
    handles += [Line2D([], [], color="#000", linewidth=1), Line2D([], [], color="#000", linewidth=1, linestyle=":")]
    ax.legend(handles, [*(_PHASE_NAMES[n] for n in colours), "of it: Delta commits", "of it: latestOffset"],
              loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=6, fontsize=8)
    ax.set_xlabel("seconds since the first batch (bar: trigger time and duration)")
    ax.set_ylabel("batch duration (s)")
    ax.set_title(f"Session restarts: {r['spec']['sites']} sites, trigger {r['trigger_s']:g} s, "
                 f"jitter {r['jitter_s']:g} s (load at start {r['load_average_at_start'][0]})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
