"""The long run's Markdown report, built from its summary alone."""

from __future__ import annotations

from .analysis import Gap, Summary
from .disk import AREAS
from .roles import ROLES


def _num(value: float | None, digits: int = 1, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+,.{digits}f}" if signed else f"{value:,.{digits}f}"


def _hours(hours: float | None) -> str:
    if hours is None:
        return "never (nothing grows)"
    return f"{hours:,.1f} h ({hours / 24:,.1f} days)" if hours >= 48 else f"{hours:,.1f} h"


def _gap(gap: Gap) -> str:
    state = ", still open at the stop" if gap.open else ""
    return f"{gap.seconds:,.1f} s after the commit at {gap.after_s / 60:.1f} min{state}"


def markdown(s: Summary, chart_name: str = "timeline.png") -> str:
    what = {role.name: role.what for role in ROLES}
    o = s.options
    lines = [
        f"# Long run {s.started_at[:19]}Z: {s.verdict.upper()}", "",
        f"`streamwarden up --headless` at {o['producer_rate']:g} msg/s for {s.ran_min:.1f} of {o['minutes']:g} min "
        f"on {s.host} ({s.cpus} cores, {o['burn_cores']} burnt by a busy loop); a sample every {o['interval_s']:g} s "
        f"({s.samples} samples); commit `{str(s.source.get('commit', '?'))[:12]}`"
        + (f", uncommitted changes in {', '.join(s.source['uncommitted'])}" if s.source.get("uncommitted") else "")
        + (f"; settings given: {', '.join(o['settings_given'])}" if o.get("settings_given") else "") + ".", "",
    ]
    lines += [f"- **{reason}**" for reason in s.reasons] + [f"- {note}" for note in s.notes]
    if s.reasons or s.notes:
        lines.append("")
    deaths = s.stream.deaths
    lines += [
        "| figure | value |", "| --- | --- |",
        f"| stream deaths | {len(deaths)} |",
        f"| red DAG runs | {len(s.red_runs)} |",
        f"| failed tasks in runs that did not end red | {len(s.failed_tasks_outside_red_runs)} |",
        f"| stream starts | {s.stream.starts} |",
        f"| committed batches (stream commits, all tables) | {s.stream.commits:,} |",
        f"| first commit | {_num(s.stream.first_commit_s)} s after `up` started |",
        f"| max batch gap | {_gap(s.stream.max_gap) if s.stream.max_gap else '-'} |",
        f"| max batch gap after the warm-up | "
        f"{_gap(s.stream.max_gap_after_warmup) if s.stream.max_gap_after_warmup else '-'} |",
        f"| platform memory at the end | RSS {s.platform_rss_mib_end:,.0f} MiB, "
        f"PSS {s.platform_pss_mib_end:,.0f} MiB |",
        f"| free disk at the end | {s.disk_free_gib_end:,.1f} GiB |",
        f"| time until the first bound | {_hours(s.hours_to_first_bound) if s.projections else 'not projected'} |",
        f"| processes left behind | {len(s.leftovers)} |",
        f"| stop | {_stop(s)} |",
        f"| the long run's own cost | {_num(s.own_cpu_percent, 1)}% of one core; a sample took "
        f"{_num(s.sample_ms_mean, 0)} ms (max {_num(s.sample_ms_max, 0)}) |",
        f"| machine load | mean 1-minute load average {_num(s.load_average_mean, 2)} on {s.cpus} cores |", "",
        f"![timeline]({chart_name})", "",
        f"## Memory per role after the {o['warmup_minutes']:g}-minute warm-up ({s.window_min:.1f} min fitted)", "",
        f"Flat: grows by no more than {o['flat_mib_per_hour']:g} MiB/h (least-squares slope of the samples after the "
        "warm-up). Fitted: the RSS of the role's long-lived processes (running for 5 minutes or more; a leak of hours "
        "lives in a process of hours, while short-lived ones come and go between samples), or, for a role with no "
        "long-lived process in most samples (tasks), the largest RSS one of its processes had in each interval. \"MiB "
        "max\" and PSS count all of the role's processes.", "",
        "| role | processes (max) | in samples | fitted on | MiB at start | MiB at end | MiB max | PSS MiB at end "
        "| slope MiB/h | flat |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in s.roles:
        flat = "not judged" if r.flat is None else "yes" if r.flat else "**no**"
        lines.append(f"| {r.role} | {r.processes_max} | {r.coverage:.0%} | {r.fitted_on} | {_num(r.mib_start, 0)} "
                     f"| {_num(r.mib_end, 0)} | {_num(r.mib_max, 0)} | {_num(r.pss_mib_end, 0)} "
                     f"| {_num(r.slope_mib_per_hour, signed=True)} | {flat} |")
    lines += ["", "Roles: " + "; ".join(f"`{r.role}` {what.get(r.role, 'none of the above')}" for r in s.roles) + "."]
    if s.task_kinds:
        lines += ["", "Tasks by kind (each task process's peak RSS, runs started after the warm-up; `airflow-tasks` "
                  "is judged on these, every kind with at least three runs):", "",
                  "| DAG task | runs | MiB first | MiB last | MiB max | slope MiB/h | flat |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        lines += [f"| {k.task} | {k.runs} | {_num(k.first_mib, 0)} | {_num(k.last_mib, 0)} | {_num(k.max_mib, 0)} "
                  f"| {_num(k.slope_mib_per_hour, signed=True)} | "
                  f"{'not judged' if k.flat is None else 'yes' if k.flat else '**no**'} |" for k in s.task_kinds]
    if s.roles_missing:
        lines += ["", f"Never seen: {', '.join(s.roles_missing)}."]
    if s.unclassified:
        lines += ["", "Command lines no role matched:", "", *(f"- `{c}`" for c in s.unclassified)]
    lines += ["", "## Disk per area", "", "| area | MiB at end | slope MiB/h | what |", "| --- | --- | --- | --- |"]
    lines += [f"| {a.area} | {a.mib_end:,.1f} | {_num(a.slope_mib_per_hour, signed=True)} | {AREAS.get(a.area, '')} |"
              for a in s.disk]
    lines += ["", "## Time until a bound", "",
              "Headroom divided by the sum of the growing slopes (roles or areas that shrink count as zero).", "",
              "| bound | headroom GiB | growth MiB/h | reached after |", "| --- | --- | --- | --- |"]
    lines += [f"| {p.bound} | {p.headroom_gib:,.2f} | {p.growth_mib_per_hour:,.1f} | {_hours(p.hours)} |"
              for p in s.projections] or ["| not projected: memory not judged (too few minutes after the warm-up) "
                                          "| | | |"]
    lines += ["", "## The stream", ""]
    lines += [f"- death: pid {d.pid} at {d.at_s / 60:.1f} min, {d.failure_class or 'no failure document'}"
              + (f": {d.message}" if d.message else "")
              + (f" (its heartbeat {d.heartbeat_age_s:.0f} s old)" if d.heartbeat_age_s is not None else "")
              for d in deaths] or ["- no death"]
    if deaths:
        lines.append("- what the warden made of each: `run-files/alerts.jsonl`; the stream's last lines: "
                     "`run-files/stream-*.log.tail`")
    lines += [f"- gap: {_gap(gap)}" for gap in s.stream.longest_gaps]
    lines += ["", "## DAG runs", ""]
    lines += [f"- red: {r['dag_id']} `{r['run_id']}` ({r.get('run_type')}) at {r['at_s'] / 60:.1f} min; failed tasks: "
              f"{', '.join(r.get('failed_tasks') or []) or 'none'}" for r in s.red_runs] or ["- no red run"]
    lines += [f"- failed task in a run that did not end red: {t['dag_id']}.{t['task_id']} `{t['run_id']}` (try "
              f"{t['try_number']}) at {t['at_s'] / 60:.1f} min" for t in s.failed_tasks_outside_red_runs]
    lines += [f"- the API did not answer at {e['at_s'] / 60:.1f} min: {e['error']}" for e in s.api_errors]
    if s.leftovers:
        lines += ["", "## Processes left behind (killed by the long run)", ""]
        lines += [f"- {p['pid']} ({p['role']}): `{p['command']}`" for p in s.leftovers]
    return "\n".join(lines) + "\n"


def _stop(s: Summary) -> str:
    if s.platform_exited:
        exited = s.platform_exited
        return f"`up` exited by itself (code {exited['exit_code']}) at {exited['at_s'] / 60:.1f} min"
    if s.stop is None:
        return "no stop recorded"
    killed = ", **killed** after the timeout" if s.stop["killed"] else ""
    return f"SIGINT ({s.stop['reason']}): exit {s.stop['exit_code']} after {s.stop['stop_s']:.0f} s{killed}"
