"""``python -m streamwarden_bench``: one seeded workload, then baseline, peer and Streamwarden on the same data.

Writes ``<results>/<date>-<host>.json``, a PNG chart and a markdown summary beside it. Exit 0 when every
engine that ran produced verified output, 1 otherwise.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import shutil
import signal
import socket
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import confluent_kafka
import pyspark

from streamwarden.local.broker import LocalBroker
from streamwarden.settings_loading import parse_duration

from .compaction import run_compaction_bench
from .engines import BENCH, QUIX_PYTHON, quix_unavailable, quix_version, run_baseline, run_quix
from .floor import run_floor
from .goals import check_goals
from .report import chart, markdown, rate, ratios, restart_brief, restart_chart, standby_brief
from .restarts import RestartBenchSpec, run_restart_bench
from .sinks import alternate, run_ref, summary
from .source import Checkout, checkout, state
from .standby import StandbyBenchSpec, run_standby_bench
from .stream import run_fixed_cost, run_latency_and_restart, run_throughput
from .validation import run_validation_bench
from .verify import verify_streamwarden
from .workload import Workload, WorkloadSpec, generate


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def _seconds(text: str) -> float:
    """A duration (``300``, ``5m``, ``0``) in seconds."""
    try:
        return 0.0 if text.strip() in ("0", "0s") else parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="streamwarden_bench", description=__doc__.splitlines()[0])
    add = p.add_argument
    add("--messages", type=int, default=2_000_000, help="messages of the main workload (default %(default)s)")
    add("--topics", type=int, default=3)
    add("--partitions", type=int, default=4)
    add("--sessions", type=int, default=200, help="sessions open at once, over all topics")
    add("--rows", type=int, default=100, help="rows per snapshot")
    add("--updates-per-session", type=int, default=200)
    add("--pad-to", type=int, default=0, metavar="BYTES", help="pad every message to at least BYTES")
    add("--seed", type=int, default=1)
    add("--max-offsets-per-trigger", type=int, default=500_000,
        help="batch size cap (lowered to a quarter of the messages, so that 3 batches follow the first)")
    add("--trigger", default="3s", help="STREAMWARDEN_TRIGGER_INTERVAL (default: the job's default, %(default)s)")
    add("--latency-seconds", type=float, default=60.0,
        help="seconds at half the steady rate for latency; as long again for the kill -9 restart")
    add("--skip-latency", action="store_true", help="no latency, restart and fixed cost phases")
    add("--fixed-cost-seconds", type=float, default=45.0,
        help="after the restart, seconds of a trickle whose batches measure the fixed cost per batch (0: none)")
    add("--fixed-cost-rate", type=float, default=40.0, help="msg/s of that trickle")
    add("--floor-seconds", type=float, default=30.0,
        help="after the job, seconds of Spark's own minimal stateful query, the floor under the fixed cost (0: none)")
    add("--no-quix", action="store_true", help="do not run the peer")
    add("--quix-python", type=Path, default=QUIX_PYTHON)
    add("--skip-scaling", action="store_true")
    add("--scaling-sessions", type=_ints, default=[200, 20_000, 200_000])
    add("--scaling-topics", type=_ints, default=[60], help="topics (4 partitions each) of the topics cases")
    add("--scaling-rows", type=int, default=10, help="rows per snapshot in the scaling runs")
    add("--scaling-messages", type=int, default=500_000)
    add("--scaling-message-bytes", type=_ints, default=[4096],
        help="message sizes of the message-size cases (every value padded to at least this many bytes)")
    add("--scaling-message-count", type=int, default=250_000, help="messages of each message-size case")
    add("--scaling-batches", type=_ints, default=[100_000],
        help="batch size caps measured on the main workload's shape (scaling messages)")
    add("--standby-kills", type=int, default=10,
        help="kill -9 of the stream with a warm standby waiting, each healed by it (0: no standby phase)")
    add("--standby-rate", type=float, default=2000.0, help="msg/s produced during the standby phase")
    add("--compare-sink-ref", metavar="REF", default=None,
        help="also run the job of commit REF (e.g. aa2af02, the manifest sink) on the main workload, alternating "
             "with today's job, and report the ratio of the medians (off by default: ~2 more minutes per run)")
    add("--sink-repeats", type=int, default=2, metavar="N", help="runs per sink in that comparison (default 2)")
    add("--skip-compaction", action="store_true", help="no compaction and vacuum benchmark")
    add("--compaction-files", type=int, default=2000, help="small files compacted (default %(default)s)")
    add("--vacuum-files", type=int, default=10_000, help="files vacuumed (default %(default)s)")
    add("--skip-validation", action="store_true", help="no validation benchmark (reconciliation and GX checks)")
    add("--validation-rows", type=int, default=10_000_000,
        help="rows of the session_rows table validated (default %(default)s; goal: 20 s for 10M on 2 cores)")
    add("--skip-restarts", action="store_true",
        help="no session restarts benchmark (batch durations while every site restarts, jittered and at once)")
    add("--restart-sites", type=int, default=50, help="site topics restarted (default %(default)s)")
    add("--restart-partitions", type=int, default=1, help="partitions per site topic (default %(default)s)")
    add("--restart-sessions", type=int, default=10, help="sessions open per site (default %(default)s)")
    add("--restart-rows", type=int, default=200, help="rows per snapshot of the sites (default %(default)s)")
    add("--restart-rate", type=float, default=250.0,
        help="messages/s over all sites, updates between the snapshots (default %(default)s)")
    add("--restart-jitter", type=_seconds, default=None,
        help="window the jittered restart spreads the sites over (default: 300 s, the schedule's default, or one "
             "--trigger per site when that is longer)")
    add("--restart-settle", type=float, default=60.0,
        help="seconds the stream settles after its start and after the jittered restart (default %(default)s)")
    add("--restart-baseline", type=float, default=60.0,
        help="seconds of steady traffic measured before the restarts (default %(default)s)")
    add("--timeout", type=float, default=3600.0, help="seconds any one engine may take")
    add("--results-dir", type=Path, default=BENCH / "results")
    add("--work-dir", type=Path, default=None,
        help="scratch folder, empty or new (default: a temporary one, removed)")
    return p


class Bench:
    """One benchmark run on one broker."""

    def __init__(self, args: argparse.Namespace, bootstrap: str, work: Path, say: Callable[[str], None]) -> None:
        self.args = args
        self.bootstrap = bootstrap
        self.work = work
        self.say = say
        self.quix_skipped = "disabled (--no-quix)" if args.no_quix else quix_unavailable(args.quix_python)
        self.run_id = f"{os.getpid():x}"
        self.ref: Checkout | None = checkout(args.compare_sink_ref, work) if args.compare_sink_ref else None

    def spec(self, name: str, **changes: Any) -> WorkloadSpec:
        a = self.args
        base = WorkloadSpec(prefix=f"bench{self.run_id}{name}", topics=a.topics, partitions=a.partitions,
                            sessions=a.sessions, rows=a.rows, updates_per_session=a.updates_per_session,
                            messages=a.messages, seed=a.seed, pad_to=a.pad_to)
        return replace(base, **changes)

    def case(self, name: str, spec: WorkloadSpec, *, quix: bool, full: bool, sinks: bool = False,
             batch: int | None = None) -> dict[str, Any]:
        """Produce ``spec`` and measure every engine on it; each engine's failure is recorded, not raised.

        With ``sinks`` (and a ref to compare with), the sink comparison runs after the baseline and the peer;
        without the latency phase its first Delta run is the Streamwarden result, with it (which produces
        more messages) the Streamwarden run follows the comparison. ``batch`` caps the job's batches lower
        than :meth:`max_offsets` would.
        """
        folder = self.work / name
        self.say(f"[{name}] producing {spec.messages:,} messages ({spec.topics} topics, {spec.sessions} sessions)")
        workload = generate(spec, self.bootstrap)
        sessions = max(1, spec.sessions // spec.topics) * spec.topics
        case: dict[str, Any] = {"workload": {**asdict(spec), "sessions": sessions, "messages": workload.messages,
                                             "produce_msg_per_s": workload.produce_rate}}
        runs: list[tuple[str, Callable[[], dict[str, Any]]]] = [
            ("baseline", lambda: run_baseline(workload, folder / "baseline", self.args.timeout))]
        if quix and not self.quix_skipped:
            runs.append(("quix", lambda: run_quix(workload, folder / "quix", self.args.quix_python, self.args.timeout)))
        else:
            case["quix"] = {"skipped": self.quix_skipped or "not in this series"}
        for engine, run in runs:
            self.measure(name, case, engine, run)
        compare = self.ref if sinks else None
        if compare is not None:
            series = self.sink_series(workload, folder, compare)
            case["sinks"] = {"ref": {k: str(v) for k, v in asdict(compare).items()}, "runs": series,
                             **summary(series, rate(case.get("baseline")))}
        if compare is not None and not full:
            case["streamwarden"] = next(r for r in case["sinks"]["runs"] if r["sink"] == "delta")
        else:
            self.measure(name, case, "streamwarden",
                         lambda: self.streamwarden(workload, folder / "streamwarden", full, batch))
        case["ratios"] = ratios(case)
        return case

    def measure(self, name: str, case: dict[str, Any], engine: str, run: Callable[[], dict[str, Any]]) -> None:
        self.say(f"[{name}] {engine}")
        try:
            case[engine] = run()
        except Exception as exc:  # recorded; the other engines still run
            case[engine] = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-2000:]}
        self.say(f"[{name}] {engine}: {_brief(case[engine])}")

    def sink_series(self, workload: Any, folder: Path, ref: Checkout) -> list[dict[str, Any]]:
        """Today's job and the ref's, alternating, throughput only, each from a cold start on the backlog."""
        a = self.args
        return alternate({
            "delta": lambda i: self.streamwarden(workload, folder / f"sinks-delta-{i}", False),
            "ref": lambda i: run_ref(ref, workload, folder / f"sinks-ref-{i}", max_offsets=self.max_offsets(workload),
                                     trigger=a.trigger, timeout=a.timeout),
        }, a.sink_repeats, self.say)

    def restarts(self) -> dict[str, Any]:
        """The session restarts benchmark on its own sites and stream; a failure is recorded, not raised."""
        a = self.args
        spec = RestartBenchSpec(sites=a.restart_sites, partitions=a.restart_partitions,
                                sessions_per_site=a.restart_sessions, rows_per_snapshot=a.restart_rows,
                                rate=a.restart_rate, trigger=a.trigger, jitter=a.restart_jitter,
                                settle_s=a.restart_settle, baseline_s=a.restart_baseline, seed=a.seed,
                                timeout=a.timeout)
        try:
            return run_restart_bench(spec, self.bootstrap, self.work / "restarts", self.say).to_json()
        except Exception as exc:  # recorded; the run's other results stand
            return {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-2000:]}

    def max_offsets(self, workload: Workload) -> int:
        """The batch size cap: at most a quarter of the workload, so that >= 3 batches follow the first."""
        cap: int = self.args.max_offsets_per_trigger
        return min(cap, -(-workload.messages // 4))

    def streamwarden(self, workload: Any, home: Path, full: bool, batch: int | None = None) -> dict[str, Any]:
        a = self.args
        max_offsets = self.max_offsets(workload) if batch is None else min(batch, self.max_offsets(workload))
        job, result = run_throughput(workload, home, max_offsets, a.trigger, a.timeout)
        result["max_offsets_per_trigger"] = max_offsets
        ends, expected = workload.ends, workload.expected
        try:
            if full:
                steady = float(result["msg_per_s"] or result.get("commit_to_commit_msg_per_s") or 0)
                extra, ends, tables = run_latency_and_restart(job, workload, 0.5 * steady, a.latency_seconds,
                                                              a.timeout)
                result.update(extra)
                expected = {**expected, **tables}
                if a.fixed_cost_seconds > 0:
                    result["fixed_cost"], ends, tables = run_fixed_cost(
                        job, workload, a.fixed_cost_rate, a.fixed_cost_seconds, a.timeout)
                    expected = {**expected, **tables}
        finally:
            job.stop()
        result["verification"] = verify_streamwarden(job.settings.root("output"), ends, expected).to_json()
        if "fixed_cost" in result and a.floor_seconds > 0:
            try:
                result["fixed_cost"]["spark_floor"] = run_floor(home / "floor", a.floor_seconds, a.timeout)
            except Exception as exc:  # recorded; the job's figures stand
                result["fixed_cost"]["spark_floor"] = {"error": f"{type(exc).__name__}: {exc}"}
        return result

    def scaling(self) -> Iterator[dict[str, Any]]:
        """The scaling series, one case at a time."""
        a = self.args
        points = [("sessions", n, {"sessions": n}) for n in a.scaling_sessions]
        points += [("topics", n, {"topics": n, "sessions": max(a.sessions, n)}) for n in a.scaling_topics]
        points += [("message_bytes", n, {"pad_to": n, "messages": a.scaling_message_count})
                   for n in a.scaling_message_bytes]
        measured = set()
        for axis, value, changes in points:
            spec = self.spec(f"{axis[0]}{value}", rows=a.scaling_rows, **{"messages": a.scaling_messages, **changes})
            if (spec.topics, spec.sessions, spec.pad_to) in measured:  # 3 topics x 200 sessions: a sessions point
                continue
            measured.add((spec.topics, spec.sessions, spec.pad_to))
            yield {"axis": axis, "value": value, **self.case(f"{axis}-{value}", spec, quix=True, full=False)}
        for batch in a.scaling_batches:  # the main workload's shape, smaller, at a lower cap
            spec = self.spec(f"b{batch}", messages=a.scaling_messages)
            yield {"axis": "batch", "value": batch, **self.case(f"batch-{batch}", spec, quix=True, full=False,
                                                               batch=batch)}

    def standby(self) -> dict[str, Any]:
        """kill -9 of a stream of its own healed by the warm standby; a failure is recorded, not raised."""
        a = self.args
        spec = StandbyBenchSpec(kills=a.standby_kills, restarts=0, rate=a.standby_rate, seed=a.seed)
        self.say(f"standby: {spec.kills} kills -9 of the stream, each healed by a warm standby")
        try:
            return run_standby_bench(spec, self.bootstrap, self.work / "standby", prefix=f"bench{self.run_id}sb")
        except Exception as exc:  # recorded; the run's other results stand
            return {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-2000:]}


def _brief(result: dict[str, Any]) -> str:
    if "error" in result:
        return f"ERROR {result['error']}"
    verdict = result.get("verification", {})
    return (f"{result.get('msg_per_s')} msg/s, peak RSS {result.get('peak_rss_mib')} MiB, "
            f"verified={verdict.get('ok')} {verdict.get('problems') or ''}")


def _versions(quix_python: Path | None) -> dict[str, str]:
    found = {"python": platform.python_version(), "pyspark": pyspark.__version__,
             "confluent_kafka": str(confluent_kafka.__version__)}
    if quix_python is not None:
        found["quixstreams"] = quix_version(quix_python)
    return found


def all_verified(results: dict[str, Any]) -> bool:
    """Every engine that ran was verified correct (none failed)."""
    cases = [results["main"], *results.get("scaling", [])]
    ran = [c[e] for c in cases for e in ("baseline", "streamwarden", "quix") if e in c and "skipped" not in c[e]]
    ran += [r for c in cases for r in c.get("sinks", {}).get("runs", [])]
    ran += [results["restarts"]] if "restarts" in results else []
    standby = results.get("standby")
    return all(r.get("verification", {}).get("ok") for r in ran) and (
        standby is None or bool(standby.get("verified", {}).get("exactly_once")
                                and standby["verified"].get("sessions_exact")))


def results_stem(folder: Path, day: str, host: str) -> Path:
    """Where a run's results go (``<stem>.json``, ``.md``, ``.png``): ``<day>-<host>``, or ``-2``, ``-3``, ...
    after it when an earlier run left files of that name (a run never overwrites another's results)."""
    stem, number = folder / f"{day}-{host}", 1
    while any(folder.glob(f"{glob.escape(stem.name)}.*")):
        number += 1
        stem = folder / f"{day}-{host}-{number}"
    return stem


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that jobs and the broker are stopped
    started = time.monotonic()
    now = datetime.now(UTC)

    def say(line: str) -> None:
        print(f"{time.monotonic() - started:7.1f}s {line}", flush=True)

    if args.work_dir is not None and args.work_dir.is_dir() and any(args.work_dir.iterdir()):
        print(f"--work-dir {args.work_dir} is not empty: a job would continue the checkpoint of the run before it "
              "on topics the broker no longer has (DATA_LOSS). Give an empty or new folder.", file=sys.stderr)
        return 2
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="swbench"))
    work.mkdir(parents=True, exist_ok=True)
    stem = results_stem(args.results_dir, now.strftime('%Y-%m-%d'), socket.gethostname())
    results: dict[str, Any] = {
        "meta": {"date": now.strftime("%Y-%m-%d"), "started_at": now.isoformat(), "host": socket.gethostname(),
                 "cpus": os.cpu_count(), "load_average_at_start": [round(v, 2) for v in os.getloadavg()],
                 "source": state(),
                 "command": sys.argv,
                 "options": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                 "notes": "absolute numbers are noisy (shared 2-core machine); compare ratios within one run"},
        "scaling": [],
    }

    def save() -> None:
        """Write the results so far (after every case: a long run that is stopped keeps what it measured)."""
        results["meta"]["elapsed_s"] = round(time.monotonic() - started, 1)
        results["verified"] = all_verified(results)
        if "main" in results:
            results["goals"] = [goal.to_json() for goal in check_goals(results)]
        args.results_dir.mkdir(parents=True, exist_ok=True)
        stem.parent.joinpath(f"{stem.name}.json").write_text(json.dumps(results, indent=2, sort_keys=True,
                                                                       default=str) + "\n")
        stem.parent.joinpath(f"{stem.name}.md").write_text(markdown(results))
        chart(results, stem.parent / f"{stem.name}.png")
        if "phases" in results.get("restarts", {}):
            restart_chart(results["restarts"], stem.parent / f"{stem.name}-restarts.png")

    try:
        with LocalBroker(log_path=work / "tansu.log") as broker:
            bench = Bench(args, broker.bootstrap_servers, work, say)
            if bench.quix_skipped:
                say(f"Quix Streams not run: {bench.quix_skipped}")
            results["meta"]["versions"] = _versions(None if bench.quix_skipped else args.quix_python)
            results["main"] = bench.case("main", bench.spec("m"), quix=True, full=not args.skip_latency,
                                         sinks=True)
            save()
            if args.standby_kills > 0:
                results["standby"] = bench.standby()
                say(f"standby: {standby_brief(results['standby'])}")
                save()
            if not args.skip_compaction:
                say(f"compaction: {args.compaction_files:,} small files; vacuum: {args.vacuum_files:,} files")
                results["compaction"] = run_compaction_bench(
                    work / "compaction", files=args.compaction_files, vacuum_files=args.vacuum_files).to_json()
                save()
            if not args.skip_validation:
                say(f"validation: {args.validation_rows:,} session rows, reconciliation and data expectations")
                figures = run_validation_bench(work / "validation", rows=args.validation_rows).to_json()
                results["validation"] = figures
                say(f"validation: {figures['validate_s']} s in all ({figures['ratio_to_goal']} of the "
                    f"{figures['goal_s']:g} s goal): reconciliation {figures['reconciliation_s']} s "
                    f"({figures['content_s']} s with every file hashed), expectations {figures['expectations_s']} s, "
                    f"GX import {figures['gx_import_s']} s; passed={figures['passed']}")
                save()
            if not args.skip_restarts:
                results["restarts"] = bench.restarts()
                say(f"restarts: {restart_brief(results['restarts'])}")
                save()
            for case in [] if args.skip_scaling else bench.scaling():
                results["scaling"].append(case)
                save()
    finally:
        if args.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    say(f"results: {stem}.json (.png, .md); verified={results['verified']}")
    print(markdown(results))
    return 0 if results["verified"] else 1
