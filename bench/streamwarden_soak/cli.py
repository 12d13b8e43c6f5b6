"""``python -m streamwarden_soak``: the platform for ``--minutes`` under a seeded plan of faults, then a verdict.

A run writes ``bench/results/soak/<UTC time>/``: ``samples.jsonl`` (the long run's looks and samples),
``soak.jsonl`` (the plan, each fault's record, the workload, open files and lag, the settling), the producers'
reports and logs, ``run-files/`` (alerts, failure documents, validation reports), then ``summary.json``,
``report.md`` and ``timeline.png``. Exit 0 when the verdict is pass, 1 when it fails, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from streamwarden_longrun.records import RunLog
from streamwarden_longrun.runner import LongRun, LongRunOptions

from streamwarden.atomic import write_json_atomic
from streamwarden.local.broker import free_port
from streamwarden.settings import load_settings
from streamwarden.tables.location import SESSION_ROWS

from .chaos import Chaos, SoakPlan
from .chart import chart
from .operator_faults import install_releases
from .outcomes import read_soak
from .plan import FaultKind, fault_plan, workload_plan
from .report import markdown
from .traffic import SITES, TrafficShape
from .verdict import summarize_soak

BENCH = Path(__file__).resolve().parents[1]
RESULTS = BENCH / "results" / "soak"
SOAK_SETTINGS = {
    # every DAG beside the stream on a short schedule, so an hour holds many of their runs
    "STREAMWARDEN_MAINTENANCE_SCHEDULE": "*/5 * * * *",
    "STREAMWARDEN_VALIDATION_SCHEDULE": "10m",
    "STREAMWARDEN_SESSION_RESTART_SCHEDULE": "none",  # the soak asks at jittered times instead
    "STREAMWARDEN_SESSION_RESTART_JITTER": "1m",
    "STREAMWARDEN_SESSION_RESTART_DEADLINE": "5m",
    # the gapping site: its damaged sessions to quarantine until their next snapshot, the stream going on
    "STREAMWARDEN_ON_GAP": "resync",
    # a fault a minute kills the stream a dozen times an hour: the shipped breaker (3 an hour) would stop the
    # soak's subject after the third; the backoff stays exponential, from a shorter base
    "STREAMWARDEN_WARDEN_MAX_RESTARTS_PER_HOUR": "60",
    "STREAMWARDEN_WARDEN_BACKOFF_BASE": "5s",
    "STREAMWARDEN_WARDEN_BACKOFF_MAX": "60s",
}
"""Settings of the platform under the soak (``--set NAME=VALUE`` adds or overrides one)."""
LOG_TAIL_LINES = 200


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m streamwarden_soak", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--minutes", type=float, default=60.0, help="how long `up` runs, its boot and the settling included "
                                                    "(default %(default)s)")
    add("--seed", type=int, default=1, help="seeds the fault plan, the workload and the traffic (default %(default)s)")
    add("--faults-per-hour", type=float, default=80.0, help="mean rate of faults (default %(default)s)")
    add("--kinds", default=",".join(kind.value for kind in FaultKind),
        help="fault kinds to draw from, comma-separated (default: all)")
    add("--warmup-minutes", type=float, default=5.0, help="no fault before this (default %(default)s)")
    add("--settle-minutes", type=float, default=8.0,
        help="no fault in the run's last minutes, before the producers stop (default %(default)s)")
    add("--settle-timeout", type=float, default=600.0,
        help="seconds the stream gets to catch up once the producers stopped (default %(default)s)")
    add("--rate", type=float, default=200.0, help="the steady producer's messages a second (default %(default)s)")
    add("--bursts-per-hour", type=float, default=6.0)
    add("--restarts-per-hour", type=float, default=4.0, help="restart_sessions runs an hour (default %(default)s)")
    add("--min-faults", type=int, default=None,
        help="fewer injected faults fail the run (default: 5/6 of the expected count at the rate)")
    add("--topology", choices=("local",), default="local",
        help="the platform under the soak: local (`streamwarden up`; the default and, for now, the only one)")
    add("--set", action="append", default=[], metavar="NAME=VALUE", help="another STREAMWARDEN_ setting for `up`")
    add("--results-dir", type=Path, default=RESULTS)
    add("--home", type=Path, default=None, help="the platform's home: a new or empty folder (default: a temporary one)")
    add("--keep-home", action="store_true", help="keep the platform's home after a passing run")
    add("--plan-only", action="store_true", help="print the seed's plan as JSON and exit")
    add("--report-only", type=Path, metavar="FOLDER", help="rewrite the report of an earlier run's folder")
    return parser


def _plan(args: argparse.Namespace) -> SoakPlan:
    start, end = args.warmup_minutes * 60, (args.minutes - args.settle_minutes) * 60
    kinds = tuple(FaultKind(name.strip()) for name in args.kinds.split(",") if name.strip())
    return SoakPlan(fault_plan(args.seed, start, end, args.faults_per_hour, kinds),
                    workload_plan(args.seed, start, end, args.bursts_per_hour, args.restarts_per_hour),
                    TrafficShape(args.rate, args.seed, SITES), args.settle_timeout)


def write_report(results: Path, home: Path, options: dict[str, Any]) -> str:
    summary = summarize_soak(results, home / "output", options)
    write_json_atomic(results / "summary.json", summary.to_json())
    (results / "report.md").write_text(markdown(summary))
    chart(RunLog.read(results / "samples.jsonl"), read_soak(results / "soak.jsonl"), summary,
          results / "timeline.png")
    return summary.verdict


def _compact(results: Path) -> None:
    """A passing run's folder, made small enough to commit once its home (the tables the reports were judged
    against) is gone: each producer's reference of its sessions' tables (megabytes) becomes their count, and the
    logs of restarted Airflow components keep their last lines."""
    for path in results.glob("producer-*.json"):
        report = json.loads(path.read_text())
        tables = report.pop("expected_tables", None) or {}
        write_json_atomic(path, {**report, "expected_sessions": len(tables)})
    for path in results.glob("*-restarted.log"):
        lines = path.read_text(errors="replace").splitlines()
        path.write_text("\n".join(lines[-LOG_TAIL_LINES:]) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    started = time.monotonic()

    def say(line: str) -> None:
        print(f"[soak {time.monotonic() - started:7.1f}s] {line}", flush=True)

    if args.report_only is not None:
        options = json.loads((args.report_only / "options.json").read_text())
        verdict = write_report(args.report_only, Path(options["home"]), options)
        say(f"{verdict}: {args.report_only / 'report.md'}")
        return 0 if verdict == "pass" else 1
    try:
        plan = _plan(args)
        given = dict(item.split("=", 1) for item in args.set)
    except ValueError as exc:
        parser.error(str(exc))
    if args.plan_only:
        print(json.dumps({"faults": [p.to_json() for p in plan.faults],
                          "workload": [p.to_json() for p in plan.workload]}, indent=1))
        return 0
    if args.home is not None and args.home.is_dir() and any(args.home.iterdir()):
        parser.error(f"--home {args.home} is not empty: give a new or empty folder")
    home = args.home or Path(tempfile.mkdtemp(prefix="sw-soak-"))
    results = args.results_dir / datetime.now(UTC).strftime("%Y-%m-%dT%H%M%SZ")
    results.mkdir(parents=True, exist_ok=True)
    settings = {**SOAK_SETTINGS, **given}
    os.environ.update(settings)  # the soak reads the same settings as the platform (the warden's hang limit)
    # the failing release's handler is imported by the stream, which runs in the platform's home
    os.environ["PYTHONPATH"] = os.pathsep.join([str(BENCH), *filter(None, [os.environ.get("PYTHONPATH")])])
    install_releases(load_settings(home=home).home_paths.releases)
    expected = args.faults_per_hour * (args.minutes - args.warmup_minutes - args.settle_minutes) / 60
    min_faults = args.min_faults if args.min_faults is not None else int(expected * 5 / 6)
    options = {"minutes": args.minutes, "seed": args.seed, "faults_per_hour": args.faults_per_hour,
               "kinds": args.kinds, "warmup_minutes": args.warmup_minutes, "settle_minutes": args.settle_minutes,
               "rate": args.rate, "sites": SITES, "min_faults": min_faults, "topology": args.topology,
               "settings": settings, "home": str(home), "command": sys.argv}
    write_json_atomic(results / "options.json", options)
    run_options = LongRunOptions(
        minutes=args.minutes, interval_s=10.0, burn_cores=0, producer_rate=args.rate, warmup_minutes=10.0,
        flat_mib_per_hour=50.0, stop_timeout_s=420.0, api_port=free_port(), home=home, results=results,
        up_producer=False, settings=settings)
    say(f"seed {args.seed}: {len(plan.faults)} faults and {len(plan.workload)} workload events planned over "
        f"{args.minutes:g} min; results to {results}")
    LongRun(run_options, Chaos(plan, results, say)).run(say)
    verdict = write_report(results, home, options)
    say(f"{verdict.upper()}: {results / 'report.md'}")
    if verdict == "pass" and args.home is None and not args.keep_home:
        shutil.rmtree(home, ignore_errors=True)
        _compact(results)
    else:
        say(f"the platform's home is kept: {home} ({home / 'output' / SESSION_ROWS})")
    return 0 if verdict == "pass" else 1
