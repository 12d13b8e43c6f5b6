"""The soak's timeline (PNG): faults and workload, the stream's commits and restarts, its lag, and the alerts, on
one time axis."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from streamwarden_longrun.records import EventType, RunLog

from .outcomes import epoch
from .plan import FaultKind
from .verdict import SoakSummary


def chart(log: RunLog, soak: dict[str, list[dict[str, Any]]], summary: SoakSummary, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # no display: a file only
    import matplotlib.pyplot as plt

    fig, (faults, stream, lag, alerts) = plt.subplots(4, 1, figsize=(15, 12), sharex=True,
                                                      gridspec_kw={"height_ratios": [3, 1.6, 1.4, 1.6]})
    o = summary.options
    fig.suptitle(f"Soak, seed {o.get('seed')}, {o.get('minutes'):g} min, {summary.faults_injected} faults: "
                 f"{summary.verdict.upper()}", fontsize=13)
    kinds = [kind.value for kind in FaultKind]
    colors = plt.get_cmap("tab10")
    for fault in soak.get("fault", []):
        row = kinds.index(fault["kind"])
        began, ended = fault["began_s"] / 60, (fault.get("ended_s") or fault["began_s"]) / 60
        color = colors(row % 10) if fault["injected"] else "lightgray"
        faults.barh(row, max(ended - began, 0.15), left=began, height=0.6, color=color)
    for item in soak.get("workload", []):
        if item["kind"] == "burst":
            faults.barh(len(kinds), float(item["seconds"]) / 60, left=item["at_s"] / 60, height=0.6, color="gray")
        elif item["kind"] == "restart_sessions":
            faults.plot(item["at_s"] / 60, len(kinds) + 1, marker="v", color="black")
    faults.set_yticks(range(len(kinds) + 2), [*kinds, "burst", "restart_sessions"], fontsize=8)
    faults.set_title("faults (bars: from injection to the end of the fault; gray: not injected) and the workload's "
                     "events", fontsize=10)

    origin = epoch(log.info.started_at)
    per_minute = Counter(int((t - origin) // 60) for s in log.samples for t in s.commit_times)
    if per_minute:
        stream.bar(list(per_minute), list(per_minute.values()), width=0.9, align="edge", color="tab:blue",
                   label="stream commits a minute")
    for event in log.of_type(EventType.STREAM_STARTED):
        stream.axvline(event.elapsed_s / 60, color="tab:green", linewidth=0.8)
    for event in log.of_type(EventType.STREAM_ENDED):
        stream.axvline(event.elapsed_s / 60, color="tab:red", linewidth=0.8, linestyle=":")
    stream.set_ylabel("commits / min")
    stream.set_title("the stream: commits a minute; green: a stream process started, red dotted: one ended",
                     fontsize=10)

    gauges = soak.get("gauge", [])
    lag.plot([g["at_s"] / 60 for g in gauges if g["lag"] is not None],
             [g["lag"] for g in gauges if g["lag"] is not None], color="tab:purple", linewidth=1)
    lag.set_ylabel("records")
    lag.set_title("lag: records in the broker the stream has not committed (gaps: the broker did not answer)",
                  fontsize=10)

    sources = sorted({a.source.split("/")[0] or "-" for a in summary.behaviour.alerts})
    for alert in summary.behaviour.alerts:
        row = sources.index(alert.source.split("/")[0] or "-")
        alerts.plot(alert.raised_s / 60, row, marker="o" if alert.explained_by else "X",
                    color="tab:green" if alert.explained_by else "tab:red", markersize=6)
    alerts.set_yticks(range(len(sources)), sources, fontsize=8)
    alerts.set_xlabel("minutes since `up` started")
    alerts.set_title("alerts by the DAG that raised them (green: explained by a fault, red X: unexplained)",
                     fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
