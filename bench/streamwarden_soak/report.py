"""The soak's report in Markdown: the verdict and its reasons, the faults by kind with detection and healing times,
the data's accounting, the alerts, and the platform's figures."""

from __future__ import annotations

from .outcomes import Timings
from .verdict import SoakSummary


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _timing_rows(detection: list[Timings], healing: list[Timings], by_kind: dict[str, int]) -> list[str]:
    heal = {t.kind: t for t in healing}
    rows = ["| fault | injected | detected (n) | detection p50 / p95 / max (s) | healed (n) | "
            "healing p50 / p95 / max (s) |", "| --- | ---: | ---: | --- | ---: | --- |"]
    for t in detection:
        h = heal[t.kind]
        rows.append(f"| {t.kind} | {by_kind.get(t.kind, 0)} | {t.count} | {_s(t.p50_s)} / {_s(t.p95_s)} / "
                    f"{_s(t.max_s)} | {h.count} | {_s(h.p50_s)} / {_s(h.p95_s)} / {_s(h.max_s)} |")
    return rows


def markdown(s: SoakSummary, chart_name: str = "timeline.png") -> str:
    o, d, b, p = s.options, s.data, s.behaviour, s.platform
    lines = [
        f"# Soak: {s.verdict.upper()}",
        "",
        f"Seed {o.get('seed')}, {o.get('minutes'):g} min of `streamwarden up --headless` (started {p.started_at[:19]}Z "
        f"on {p.host}, {p.cpus} cores), steady traffic {o.get('rate'):g} msg/s on {o.get('sites')} sites with "
        f"bursts, faults at {o.get('faults_per_hour'):g}/h from minute {o.get('warmup_minutes'):g} to "
        f"{o.get('minutes', 0) - o.get('settle_minutes', 0):g}, then settling. Source: "
        f"`{p.source.get('commit', '?')}`.",
        "",
        f"![timeline]({chart_name})",
        "",
    ]
    if s.reasons:
        lines += ["## Why it failed", "", *[f"- {reason}" for reason in s.reasons], ""]
    lines += [
        "## Faults", "",
        f"{s.faults_injected} injected of {s.faults_planned} planned. Detected: the platform acted on it (the warden "
        "started a new stream; Airflow failed the killed task). Healed: the stream committed again afterwards. "
        "Times from the injection.", "",
        *_timing_rows(b.detection, b.healing, s.faults_by_kind), "",
        f"Missed detections: {len(b.missed)}. Stream deaths no fault caused: {len(s.unexplained_deaths)}. "
        f"Stream processes started: {b.stream_starts} (faults that kill or hang it: {b.stream_killing_faults}). "
        f"Circuit breaker opened: {'yes' if b.breaker_opened else 'no'}. Two stream drivers at once: "
        f"{'yes' if b.second_stream else 'never'}.", "",
        f"Availability: {'-' if b.availability is None else f'{b.availability:.1%}'} of {b.minutes_judged} minutes "
        "(from the first commit to the end of the faults) had a committed batch while records waited.", "",
        "## Data", "",
        "| check | result |", "| --- | --- |",
        f"| offsets (every site partition, up to the end the broker answered after the producers stopped) | "
        f"{d.offsets.expected:,} expected, {d.offsets.found:,} rows, **{d.offsets.lost:,} lost, "
        f"{d.offsets.duplicated:,} duplicated**, {d.offsets.in_both_tables} in both tables |",
        f"| session tables against the producers' own reference | {d.sessions.compared:,} sessions, "
        f"{d.sessions.cells_compared:,} cells compared: **{d.sessions.cells_wrong:,} wrong**, {d.sessions.missing} "
        f"missing, {d.sessions.extra} extra ({d.sessions.gapped_left_out} gapped sessions judged below"
        + (f"; not compared, their producers' messages not all delivered: {', '.join(d.sessions.left_out_producers)}"
           if d.sessions.left_out_producers else "") + ") |",
        f"| injected gaps | {d.inputs.gaps_injected}, {d.inputs.gaps_quarantined} with a SEQUENCE_GAP row in "
        "quarantine |",
        f"| malformed records | {d.inputs.malformed_sent}, {d.inputs.malformed_quarantined} in quarantine |",
        f"| the final validate_output | {s.final_validation.get('state')} ({s.final_validation.get('dag_run', '-')}) |",
        f"| caught up after the faults | {_s(s.caught_up_s)} s |", "",
    ]
    examples = [*d.offsets.examples, *d.offsets.table_problems, *d.sessions.examples, *d.inputs.examples]
    if examples:
        lines += ["Examples:", "", *[f"- {line}" for line in examples], ""]
    lines += ["## Alerts", "", f"{len(b.alerts)} alerts, {len(b.unexplained)} unexplained.", "",
              "| min | source | class | summary | explained by |", "| ---: | --- | --- | --- | --- |"]
    lines += [f"| {a.raised_s / 60:.1f} | {a.source} | {a.failure_class or '-'} | {a.summary[:140]} | "
              f"{a.explained_by or '**nothing**'} |" for a in b.alerts]
    lines += ["", "## The platform over the run", "",
              "| role | processes (max) | RSS max (MiB) | slope (MiB/h) |", "| --- | ---: | ---: | ---: |"]
    lines += [f"| {r.role} | {r.processes_max} | {r.mib_max:,.0f} | {_s(r.slope_mib_per_hour)} |" for r in p.roles]
    if s.bounds_judged:
        lines += ["", "Bounded: each figure's peak in the second half of the faults' window against the first half's "
                  "(at most 1.25x, plus 64 MiB, 2 processes or 200 files; the broker keeps every record and is left "
                  "out):", "",
                  "| figure | first half max | second half max | bounded |", "| --- | ---: | ---: | --- |"]
        lines += [f"| {h.what} | {h.first_max:,.0f} | {h.second_max:,.0f} | {'yes' if h.bounded else '**no**'} |"
                  for h in s.bounds]
    else:
        lines += ["", "Bounds not judged: the faults' window is under 20 minutes."]
    lines += ["", "| disk area | MiB at the end | slope (MiB/h) |", "| --- | ---: | ---: |"]
    lines += [f"| {a.area} | {a.mib_end:,.1f} | {_s(a.slope_mib_per_hour)} |" for a in p.disk]
    lines += ["", f"Open files of the platform: {s.fds}. Hours to the first bound (disk, memory): "
              f"{_s(p.hours_to_first_bound)}. `up`'s stop: {p.stop}. Left behind: {p.leftovers or 'nothing'}.", ""]
    if b.soak_errors:
        lines += ["## The soak's own errors", "", *[f"- {line}" for line in b.soak_errors], ""]
    return "\n".join(lines)
