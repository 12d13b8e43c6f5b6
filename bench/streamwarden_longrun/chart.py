"""The long run's timeline (PNG): memory per role, disk per area, and the stream's commits, deaths and red runs."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from .analysis import LONG_LIVED, Summary, fitted_bytes
from .records import MIB, EventType, RunLog
from .roles import ROLE_NAMES

_DEATH, _RED, _TASK = "tab:red", "tab:orange", "gold"


def chart(log: RunLog, summary: Summary, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # no display: a file only
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    samples = log.samples
    minutes = [s.elapsed_s / 60 for s in samples]
    fig, (memory, total, disk, stream) = plt.subplots(4, 1, figsize=(15, 15), sharex=True,
                                                      gridspec_kw={"height_ratios": [3, 1.4, 2, 1.4]})
    fig.suptitle(f"Long run {summary.started_at[:16]}Z, {summary.host}: {summary.verdict.upper()}  "
                 f"({summary.ran_min:.0f} min, {summary.options['producer_rate']:g} msg/s, "
                 f"{summary.options['burn_cores']} core burnt)", fontsize=13)

    roles = [role for role in ROLE_NAMES if any(role in s.roles for s in samples)]
    colors = plt.get_cmap("tab10")
    fitted = {r.role: r for r in summary.roles}
    for index, role in enumerate(roles):
        color, style = colors(index % 10), "-" if index < 10 else "--"
        summary_of = fitted.get(role)
        fitted_on = summary_of.fitted_on if summary_of is not None else LONG_LIVED
        what = [fitted_bytes(s.roles[role], fitted_on) / MIB if role in s.roles else 0.0 for s in samples]
        everything = [s.roles[role].rss_bytes / MIB if role in s.roles else 0.0 for s in samples]
        slope = summary_of.slope_mib_per_hour if summary_of else None
        label = f"{role} ({slope:+.1f} MiB/h)" if slope is not None else role
        memory.plot(minutes, what, color=color, linestyle=style, linewidth=1.3, label=label)
        memory.plot(minutes, everything, color=color, linestyle=style, linewidth=0.6, alpha=0.3)
    memory.set_ylabel("RSS per role (MiB)")
    memory.set_title("memory per process role: what is fitted (the long-lived processes' RSS; for tasks, the "
                     "largest one's peak), and faint, all of the role's processes at each sample", fontsize=10)
    memory.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, title="role (slope after warm-up)")

    total.plot(minutes, [sum(m.rss_bytes for m in s.roles.values()) / 2**30 for s in samples], label="RSS, all roles")
    total.plot(minutes, [sum(m.rss_bytes if m.pss_bytes is None else m.pss_bytes for m in s.roles.values()) / 2**30
                         for s in samples], label="PSS, all roles")
    total.plot(minutes, [s.machine_available_bytes / 2**30 for s in samples], label="machine: available",
               linestyle="--", color="gray")
    total.set_ylabel("GiB")
    total.set_title("the platform's memory, and what the machine has left", fontsize=10)
    total.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)

    areas = list(samples[-1].disk_bytes) if samples else []
    disk_slopes = {a.area: a.slope_mib_per_hour for a in summary.disk}
    for index, area in enumerate(areas):
        values = [s.disk_bytes.get(area, 0) / MIB for s in samples]
        if max(values, default=0) <= 0:
            continue
        slope = disk_slopes.get(area)
        disk.plot(minutes, values, color=colors(index % 10), linestyle="-" if index < 10 else "--",
                  label=f"{area} ({slope:+.1f} MiB/h)" if slope is not None else area)
    disk.set_ylabel("MiB on disk")
    disk.set_title(f"disk per area of the home (free at the end: {summary.disk_free_gib_end:,.1f} GiB)", fontsize=10)
    disk.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, title="area (slope after warm-up)")

    start = datetime.fromisoformat(log.info.started_at).timestamp()
    commits = sorted((t - start) / 60 for s in samples for t in s.commit_times)
    if commits:
        bins = int(max(commits)) + 1  # one a minute
        stream.hist(commits, bins=bins, range=(0, bins), color="tab:blue", alpha=0.6)
    stream.set_ylabel("commits / min")
    gap = summary.stream.max_gap
    stream.set_title("the stream's commits per minute" + (
        f"; max batch gap {gap.seconds:.0f} s at {gap.after_s / 60:.1f} min" if gap else ""), fontsize=10)

    warmup = summary.options["warmup_minutes"]
    deaths = [d.at_s / 60 for d in summary.stream.deaths]
    red = [r["at_s"] / 60 for r in summary.red_runs]
    tasks = [t["at_s"] / 60 for t in summary.failed_tasks_outside_red_runs]
    stop = next((e.elapsed_s / 60 for e in log.of_type(EventType.STOPPING)), None)
    right = max([*minutes, *([stop] if stop is not None else []), 1.0])
    for axis in (memory, total, disk, stream):
        axis.set_xlim(0, right * 1.01)
        if warmup < right:
            axis.axvline(warmup, color="gray", linestyle="--", linewidth=0.8)
        for at in deaths:
            axis.axvline(at, color=_DEATH, linewidth=1.6)
        for at in red:
            axis.axvline(at, color=_RED, linewidth=1.2, linestyle="-.")
        for at in tasks:
            axis.axvline(at, color=_TASK, linewidth=1.0, linestyle=":")
        if stop is not None:
            axis.axvline(stop, color="black", linewidth=0.8)
        axis.grid(alpha=0.3)
    stream.legend(handles=[
        Line2D([], [], color="gray", linestyle="--", label=f"end of the {warmup:g}-min warm-up"),
        Line2D([], [], color=_DEATH, label=f"stream death ({len(deaths)})"),
        Line2D([], [], color=_RED, linestyle="-.", label=f"red DAG run ({len(red)})"),
        Line2D([], [], color=_TASK, linestyle=":", label=f"failed task, run not red ({len(tasks)})"),
        Line2D([], [], color="black", label="SIGINT to up"),
    ], loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    stream.set_xlabel("minutes since `streamwarden up` started")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
