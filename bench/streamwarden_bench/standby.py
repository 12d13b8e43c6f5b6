"""``python -m streamwarden_bench.standby``: kill -9 of the stream, healed by a warm standby or by a restart.

The session pipeline reads the seeded snapshot/update workload while the producer writes it at ``--rate``; the
stream is killed ``--kills`` times with a standby waiting (the standby takes the lease and commits the next
batch; a new standby is started beside it) and ``--restarts`` times without (a new process is started right after
the kill, as the warden's restart does once it has seen the death). Each takeover's time from the kill to the
lease taken again and to the next committed batch goes to ``--results`` as JSON and Markdown, with p50 and max.
At rest every offset is in ``session_rows`` or ``quarantine`` exactly once and every open session's table is the
producer's, or the run is void.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import tempfile
import threading
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

from streamwarden.local.broker import LocalBroker
from streamwarden.settings import Settings, load_settings
from streamwarden.tables.location import QUARANTINE, SESSION_ROWS
from streamwarden.testing.replay import caught_up, final_tables, offsets_by_table, read_table
from streamwarden.testing.takeover import StreamProcesses, Takeover, held_by, kill_and_heal, wait_for
from streamwarden.warden.launcher import stream_env
from streamwarden.wire import TableSchema

from .measure import tree
from .workload import WorkloadSpec, log_ends, produce


@dataclass(frozen=True)
class StandbyBenchSpec:
    """How many kills of each kind, the producer's rate meanwhile, the workload's seed."""

    kills: int = 10
    restarts: int = 5
    rate: float = 2000.0
    seed: int = 1


def run_standby_bench(spec: StandbyBenchSpec, bootstrap: str, folder: Path, prefix: str = "standby"
                      ) -> dict[str, Any]:
    """The kills on a stream of its own (topics ``<prefix>-*`` on ``bootstrap``, files under ``folder``); the
    figures per kind, the waiting standby's RSS (its whole process tree, sampled before each kill), and the
    verdict of the output at rest."""
    home = folder / "home"
    folder.mkdir(parents=True, exist_ok=True)
    workload = WorkloadSpec(prefix=prefix, topics=3, partitions=4, sessions=200, messages=0, seed=spec.seed)
    settings = load_settings(home=home, bootstrap_servers=bootstrap, topic_pattern=workload.pattern,
                             pipeline="sessions", trigger_interval="1s")
    stop = threading.Event()
    reports: list[Any] = []
    producer = threading.Thread(daemon=True, target=lambda: reports.append(
        produce(settings, workload.options(rate=spec.rate, duration=24 * 3600.0, max_messages=0), stop)))
    producer.start()
    processes = StreamProcesses(stream_env(settings), folder / "streams.log")
    standby_rss: list[float] = []
    try:
        takeovers = _takeovers(settings, processes, spec, standby_rss)
        stop.set()
        producer.join(120)
        ends = log_ends(bootstrap, workload.pattern)
        wait_for(lambda: caught_up(settings.checkpoint_location, ends), 900, "every offset committed", 0.5)
        settings.run_paths.stop_marker.touch()
        wait_for(lambda: held_by(settings.lease_path) is None, 180, "the stream to drain", 0.5)
    finally:
        stop.set()
        processes.kill_all()
    by_kind = {kind: [t for t in takeovers if t.standby is (kind == "standby")] for kind in ("standby", "restart")}
    return {"spec": asdict(spec), "verified": _verify(settings, ends, reports[0].expected_tables),
            "summary": {kind: {"kills": len(items), "lease_s": _summary([t.lease_s for t in items]),
                               "next_batch_s": _summary([t.commit_s for t in items])}
                        for kind, items in by_kind.items()},
            "standby_rss_mib": _summary(standby_rss), "takeovers": [t.to_json() for t in takeovers]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="streamwarden_bench.standby", description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=10, help="kills with a standby waiting (default: 10)")
    parser.add_argument("--restarts", type=int, default=5, help="kills healed by a new process (default: 5)")
    parser.add_argument("--rate", type=float, default=2000.0, help="messages per second produced meanwhile")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--results", type=Path, default=Path("bench/results/standby"))
    args = parser.parse_args(argv)
    started = datetime.now(UTC)
    spec = StandbyBenchSpec(kills=args.kills, restarts=args.restarts, rate=args.rate, seed=args.seed)
    with tempfile.TemporaryDirectory(prefix="standby-bench-") as folder, LocalBroker() as broker:
        document = run_standby_bench(spec, broker.bootstrap_servers, Path(folder))
    verified = document["verified"]
    path = _write(args.results, started, document)
    print(f"results: {path}")
    return 0 if verified["exactly_once"] and verified["sessions_exact"] else 1


def _takeovers(settings: Settings, processes: StreamProcesses, spec: StandbyBenchSpec,
               standby_rss: list[float]) -> list[Takeover]:
    processes.start()
    wait_for(lambda: bool(list((settings.checkpoint_location / "commits").glob("[0-9]*"))), 300,
             "the first batch committed", 0.2)
    rng = random.Random(spec.seed)
    done = []
    for standby in [True] * spec.kills + [False] * spec.restarts:
        done.append(kill_and_heal(settings, processes, rng, standby=standby,
                                  on_standby_ready=lambda pid: standby_rss.append(_tree_rss_mib(pid))))
        print(f"kill -9 ({'standby' if standby else 'restart'}): lease {done[-1].lease_s:.2f}s, "
              f"next batch {done[-1].commit_s:.2f}s", flush=True)
    return done


def _tree_rss_mib(pid: int) -> float:
    """The summed RSS of a process and its descendants, MiB."""
    total = 0
    for process in tree(pid):
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            total += process.memory_info().rss
    return round(total / 2**20, 1)


def _verify(settings: Settings, ends: dict[str, dict[int, int]], expected: Any) -> dict[str, Any]:
    output = settings.root("output")
    found = offsets_by_table(output, [SESSION_ROWS, QUARANTINE])
    produced = {(t, p, o) for t, parts in ends.items() for p, end in parts.items() for o in range(end)}
    rows = read_table(output / SESSION_ROWS)
    return {"offsets": len(produced), "exactly_once": not found[SESSION_ROWS] & found[QUARANTINE]
            and found[SESSION_ROWS] | found[QUARANTINE] == produced,
            "sessions_exact": final_tables(rows, TableSchema.parse(settings.table_schema)) == expected}


def _summary(values: list[float]) -> dict[str, float]:
    return {"p50": round(statistics.median(values), 2), "max": round(max(values), 2)} if values else {}


def summary_lines(document: dict[str, Any]) -> list[str]:
    """The kills per kind as a markdown table, the standby's RSS and the verdict at rest."""
    lines = ["| healed by | kills | lease taken p50 / max | next batch committed p50 / max |",
             "| --- | --- | --- | --- |"]
    for kind, figures in document["summary"].items():
        lease, batch = figures["lease_s"], figures["next_batch_s"]
        if lease:
            lines.append(f"| {kind} | {figures['kills']} | {lease['p50']:.2f} / {lease['max']:.2f} s | "
                         f"{batch['p50']:.2f} / {batch['max']:.2f} s |")
    rss, verified = document.get("standby_rss_mib") or {}, document["verified"]
    if rss:
        lines += ["", f"The waiting standby's RSS (its process tree, before each kill): p50 {rss['p50']:,.0f} MiB, "
                  f"max {rss['max']:,.0f} MiB."]
    return [*lines, "", f"At rest: {verified['offsets']:,} offsets, exactly once: {verified['exactly_once']}; "
            f"every open session's table exact: {verified['sessions_exact']}."]


def _write(results: Path, started: datetime, document: dict[str, Any]) -> Path:
    folder = results / started.strftime("%Y-%m-%dT%H%M%SZ")
    folder.mkdir(parents=True, exist_ok=True)
    document = {"started": started.isoformat(), "cpus": psutil.cpu_count(), **document}
    (folder / "standby.json").write_text(json.dumps(document, indent=2, sort_keys=True))
    lines = [f"# Warm standby against a restart ({started:%Y-%m-%d %H:%M} UTC, {psutil.cpu_count()} cores)", "",
             f"Session pipeline, 1 s trigger, producer at {document['spec']['rate']:g} msg/s; kill -9 of the "
             "stream's group at a random moment. Times from the kill.", "", *summary_lines(document), ""]
    (folder / "README.md").write_text("\n".join(lines))
    return folder


if __name__ == "__main__":
    raise SystemExit(main())
