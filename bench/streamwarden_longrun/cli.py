"""``python -m streamwarden_longrun``: run the platform for ``--minutes`` and report, or report on an earlier run.

A run writes ``bench/results/longrun/<UTC time>/``: ``samples.jsonl`` as it goes, ``up.log`` (`up`'s own
output), ``run-files/`` (the home's alerts, failure documents, validation reports and the tails of the stream's launch
logs), and
at the end ``summary.json``, ``report.md`` and ``timeline.png``. The platform's home is a fresh temporary
folder, deleted after a passing run (kept, and named in the output, otherwise, with ``--keep-home`` or when
given with ``--home``).
Exit 0 when the verdict is pass, 1 when it is fail, 3 when incomplete (cut short, or too short to judge memory).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from streamwarden.atomic import write_json_atomic
from streamwarden.local.broker import free_port
from streamwarden.local.broker_memory import DEMO_RATE

from .analysis import Summary, summarize
from .chart import chart
from .records import RunLog
from .report import markdown
from .runner import LongRun, LongRunOptions

RESULTS = Path(__file__).resolve().parents[1] / "results" / "longrun"
EXIT_CODES = {"pass": 0, "fail": 1, "incomplete": 3}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m streamwarden_longrun", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=120.0,
                        help="how long `up` runs before it is stopped with SIGINT (default %(default)s)")
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between samples (default %(default)s)")
    parser.add_argument("--burn-cores", type=int, default=1,
                        help="busy-loop processes beside the platform, one core each (default %(default)s)")
    parser.add_argument("--producer-rate", type=float, default=DEMO_RATE,
                        help="the demo producer's messages per second (default %(default)s, `up`'s default)")
    parser.add_argument("--warmup-minutes", type=float, default=10.0,
                        help="samples before this are left out of the slopes (default %(default)s)")
    parser.add_argument("--flat-mib-per-hour", type=float, default=10.0,
                        help="a role whose memory grows by more than this is not flat (default %(default)s)")
    parser.add_argument("--stop-timeout", type=float, default=420.0,
                        help="seconds `up` gets to stop after SIGINT before it is killed (default %(default)s; "
                             "`up` itself gives the stream's drain 90 s and Airflow 70 s)")
    parser.add_argument("--results-dir", type=Path, default=RESULTS,
                        help="where the run's folder is made (default bench/results/longrun)")
    parser.add_argument("--home", type=Path, default=None,
                        help="the platform's STREAMWARDEN_HOME: a new or empty folder (default: a fresh temporary one)")
    parser.add_argument("--keep-home", action="store_true", help="keep the platform's home after a passing run")
    parser.add_argument("--report-only", type=Path, metavar="SAMPLES",
                        help="only (re)write the report of an earlier run: its samples.jsonl or its folder")
    return parser


def write_report(samples: Path) -> Summary:
    """``summary.json``, ``report.md`` and ``timeline.png`` beside ``samples``."""
    log = RunLog.read(samples)
    summary = summarize(log)
    folder = samples.parent
    write_json_atomic(folder / "summary.json", summary.to_json())
    (folder / "report.md").write_text(markdown(summary, "timeline.png"))
    chart(log, summary, folder / "timeline.png")
    return summary


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    started = time.monotonic()

    def say(line: str) -> None:
        print(f"[longrun {time.monotonic() - started:7.1f}s] {line}", flush=True)

    if args.report_only is not None:
        samples = args.report_only / "samples.jsonl" if args.report_only.is_dir() else args.report_only
        summary = write_report(samples)
        say(f"{summary.verdict}: {samples.parent / 'report.md'}")
        return EXIT_CODES[summary.verdict]

    if args.home is not None and args.home.is_dir() and any(args.home.iterdir()):
        print(f"--home {args.home} is not empty: the run would continue another platform's checkpoint, tables and "
              "breaker history. Give a new or empty folder.", file=sys.stderr)
        return 2
    home = args.home or Path(tempfile.mkdtemp(prefix="sw-longrun-"))
    results = args.results_dir / datetime.now(UTC).strftime("%Y-%m-%dT%H%M%SZ")
    options = LongRunOptions(
        minutes=args.minutes, interval_s=args.interval, burn_cores=args.burn_cores, producer_rate=args.producer_rate,
        warmup_minutes=args.warmup_minutes, flat_mib_per_hour=args.flat_mib_per_hour,
        stop_timeout_s=args.stop_timeout, api_port=free_port(), home=home, results=results)
    samples = LongRun(options).run(say)
    summary = write_report(samples)
    for line in [*summary.reasons, *summary.notes]:
        say(f"  {line}")
    if summary.verdict == "pass" and args.home is None and not args.keep_home:
        shutil.rmtree(home, ignore_errors=True)
    else:
        say(f"the platform's home is kept: {home}")
    say(f"{summary.verdict.upper()}: {results / 'report.md'} (timeline.png, summary.json, samples.jsonl)")
    return EXIT_CODES[summary.verdict]
