"""The ``streamwarden`` command: the same functions the DAGs call, for people and scripts."""

from __future__ import annotations

import argparse
import getpass
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from streamwarden.failures import EXIT_CODES, FailureClass, StreamwardenError
from streamwarden.secrets import scrub
from streamwarden.session_handler import load_checked_handler
from streamwarden.settings import Settings, load_settings
from streamwarden.settings_loading import SettingsError
from streamwarden.warden.settings import load_warden_settings
from streamwarden.wire import TableSchema

Command = Callable[[Settings, argparse.Namespace], int]


def _broker(settings: Settings, args: argparse.Namespace) -> int:
    from streamwarden.local.broker import LocalBroker

    broker = LocalBroker(port=args.port).start()
    print(f"Kafka-protocol broker (Tansu, memory storage) on {broker.bootstrap_servers}; Ctrl-C stops it",
          flush=True)
    try:
        assert broker.process is not None
        return broker.process.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        broker.stop()


def _produce(settings: Settings, args: argparse.Namespace) -> int:
    from streamwarden.local.producer import options_from_args, run_producer

    try:
        options = options_from_args(args)
    except ValueError as exc:  # a rule across options (--ignore-restarts naming another topic, a bad --prefix)
        print(f"streamwarden produce: {exc}", file=sys.stderr)
        return 2
    report = run_producer(settings, options, progress=lambda line: print(line, flush=True))
    print(json.dumps(report.to_json(), sort_keys=True), flush=True)
    return 0


def _stream(standby: bool) -> int:
    """Loads its own settings: invalid ones are documented in last_failure.json for the warden."""
    from streamwarden.stream.runner import run_stream_from_environment

    return run_stream_from_environment(standby=standby)


def _stop(settings: Settings, args: argparse.Namespace) -> int:
    from streamwarden.warden.stop import request_stop

    return request_stop(settings, wait=args.wait)


def _launch(settings: Settings, args: argparse.Namespace) -> int:
    from streamwarden.stream_host.commands import launch
    from streamwarden.upgrade.release import load_release_settings

    answer = launch(load_release_settings(), args.spark_options, args.lease_timeout, standby=args.standby)
    print(answer.to_line(), flush=True)
    return answer.exit_status


def _halt(settings: Settings, args: argparse.Namespace) -> int:
    from streamwarden.stream_host.commands import halt
    from streamwarden.upgrade.release import load_release_settings

    answer = halt(load_release_settings(), args.drain_timeout, args.term_timeout)
    print(answer.to_line(), flush=True)
    return answer.exit_status


def _stream_host(settings: Settings, args: argparse.Namespace) -> int:
    from streamwarden.stream_host.sshd import ServerSpec, StreamHostFiles, serve

    serve(ServerSpec(args.listen, args.port, args.host_key, args.authorized_keys, args.login),
          StreamHostFiles(args.folder or settings.home / "stream-host"))


def _status(settings: Settings, args: argparse.Namespace) -> int:
    from streamwarden.warden.status import read_status

    print(json.dumps(read_status(settings).to_json(), indent=2, sort_keys=True, default=str))
    return 0


def _release_hold(settings: Settings, args: argparse.Namespace) -> int:
    from streamwarden.runfiles.hold import release_hold

    released = release_hold(settings, None)
    print("no hold" if released is None else f"released: the stream was {released.describe()}")
    return 0


def _tables(settings: Settings, args: argparse.Namespace) -> int:
    from streamwarden.tables.reading import summarize, summarize_all

    summaries = [summarize(settings, args.table)] if args.table else summarize_all(settings)
    if args.json:
        print(json.dumps([s.to_json() for s in summaries], indent=2, sort_keys=True))
    else:
        print("\n\n".join(s.text() for s in summaries))
    if all(s.head is None for s in summaries):
        # The home defaults to ./.streamwarden: from another folder than the checkout, `make run`'s tables are not
        # missing, they are elsewhere.
        print(f"streamwarden: no table under {settings.root('output')}. The platform's home is "
              f"{settings.home.resolve()} (STREAMWARDEN_HOME; by default .streamwarden in the current folder): "
              "`make run` keeps its state in the checkout's .streamwarden, so run this command from the checkout "
              "or set STREAMWARDEN_HOME to that folder.", file=sys.stderr)
    return 0


def _maintain(settings: Settings, args: argparse.Namespace) -> int:
    from streamwarden.maintenance import steps
    from streamwarden.maintenance.request import request_from_params
    from streamwarden.maintenance.settings import load_maintenance_settings

    maintenance = load_maintenance_settings()
    params = {"tables": args.table, "partition_filter": args.partition_filter, "dry_run": args.dry_run,
              "target_file_size_mib": args.target_file_size_mib, "min_files": args.min_files}
    report = steps.run(settings, maintenance, request_from_params(params, settings, maintenance))
    print(json.dumps(report.to_json(), indent=2, sort_keys=True) if args.json else report.text())
    return 0


_FINDING_EXITS = {"DATA_EXPIRED": FailureClass.DATA_LOSS, "EXPECTATION_FAILED": FailureClass.MALFORMED,
                  "STALE": FailureClass.ENVIRONMENT}  # every other finding: INTEGRITY


def _validate(settings: Settings, args: argparse.Namespace) -> int:
    from streamwarden.validation import steps
    from streamwarden.validation.alerting import GRAVITY
    from streamwarden.validation.request import request_from_params
    from streamwarden.validation.settings import load_validation_settings

    validation = load_validation_settings()
    versions = {}
    for pin in args.version or []:
        table, _, version = pin.partition("=")
        versions[table] = int(version) if version.isdigit() else version
    params = {"tables": args.table, "checks": args.check, "versions": versions, "as_of": args.as_of,
              "rows": args.rows}
    recorded = steps.run(settings, validation, request_from_params(params, settings, validation))
    report = recorded.report
    print(json.dumps(report.summary(recorded.path), indent=2, sort_keys=True) if args.json else report.text())
    if report.passed:
        return 0
    gravest = next(c.value for c in GRAVITY if c.value in report.classes())
    return EXIT_CODES[_FINDING_EXITS.get(gravest, FailureClass.INTEGRITY)]


def _up(settings: Settings, args: argparse.Namespace) -> int:
    from streamwarden.local.up import run_platform

    return run_platform(settings, args)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got {text!r}")
    return value


def _port(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"expected a TCP port 1-65535, got {text!r}")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    from streamwarden.local import producer
    from streamwarden.local import up as platform_up

    parser = argparse.ArgumentParser(
        prog="streamwarden",
        description="Kafka -> Spark Structured Streaming -> exactly-once Delta Lake tables, kept alive by Airflow. "
        "Settings come from STREAMWARDEN_* environment variables (and STREAMWARDEN_CONFIG_FILE).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    broker = sub.add_parser("broker", help="run a local Kafka-protocol broker (Tansu) until Ctrl-C")
    broker.add_argument("--port", type=_port, default=9092, help="loopback port to listen on (default: 9092)")
    broker.set_defaults(func=_broker)
    produce = sub.add_parser("produce", help="simulate collection points publishing snapshot/update sessions")
    producer.add_arguments(produce)
    produce.set_defaults(func=_produce)
    stream = sub.add_parser("stream", help="run the streaming job in the foreground")
    stream.add_argument("--standby", action="store_true", help="as a warm standby: start Spark, wait for the "
                        "checkpoint's lease, take over when the running stream's holder dies")
    stop = sub.add_parser("stop", help="drain and stop the running stream (graceful)")
    stop.add_argument("--wait", type=_seconds, default=None, metavar="SECONDS",
                      help="wait up to SECONDS for the stream to exit (default: do not wait)")
    stop.set_defaults(func=_stop)
    launch = sub.add_parser("launch", help="start the stream detached on this host; one JSON answer (what a "
                            "stream host runs for the warden)")
    launch.add_argument("--standby", action="store_true", help="a warm standby beside the running stream: it "
                        "waits for the checkpoint's lease and takes over when the stream's holder dies")
    launch.add_argument("--lease-timeout", type=_seconds, default=180.0, metavar="SECONDS",
                        help="the stream must hold its lease within SECONDS (default: 180)")
    launch.add_argument("spark_options", nargs="*", metavar="SPARK_SUBMIT_OPTION",
                        help="after --: spark-submit's options (default: the settings' master and query name)")
    launch.set_defaults(func=_launch)
    halt = sub.add_parser("halt", help="stop the stream on this host: drain, then SIGTERM, then SIGKILL; one JSON "
                          "answer")
    halt.add_argument("--drain-timeout", type=_seconds, default=120.0, metavar="SECONDS")
    halt.add_argument("--term-timeout", type=_seconds, default=30.0, metavar="SECONDS")
    halt.set_defaults(func=_halt)
    host = sub.add_parser("stream-host", help="serve as the stream host: an SSH server whose sessions may only "
                          "launch or halt the stream (docs/deployment.md)")
    host.add_argument("--listen", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    host.add_argument("--port", type=_port, default=2222, help="port to listen on (default: 2222)")
    host.add_argument("--host-key", type=Path, required=True, help="the server's private host key")
    host.add_argument("--authorized-keys", type=Path, required=True, help="the warden's public key(s)")
    host.add_argument("--login", default=getpass.getuser(), help="the user the warden logs in as (default: this one)")
    host.add_argument("--folder", type=Path, help="its configuration (default: $STREAMWARDEN_HOME/stream-host)")
    host.set_defaults(func=_stream_host)
    session = sub.add_parser("stream-host-session", help="the stream host's gate, run by its SSH server for each "
                             "session")
    session.add_argument("--env-file", type=Path, required=True)
    sub.add_parser("status", help="print the stream's health as JSON").set_defaults(func=_status)
    sub.add_parser("release-hold", help="release the hold of a recovery or upgrade run that is gone, so the "
                   "warden may start the stream again").set_defaults(func=_release_hold)
    tables = sub.add_parser("tables", help="the output tables: version, rows, files, last commit, offsets held")
    tables.add_argument("table", nargs="?", help="one table (default: every table of the pipeline)")
    tables.add_argument("--json", action="store_true", help="print JSON instead of text")
    tables.set_defaults(func=_tables)
    maintain = sub.add_parser("maintain", help="compact small files (proving every row kept), vacuum, checkpoint: "
                              "one maintain_tables run")
    maintain.add_argument("--table", action="append", help="a table to maintain (repeatable; default: all)")
    maintain.add_argument("--partition-filter", default="", help="column=value,... (default: every partition)")
    maintain.add_argument("--target-file-size-mib", type=int, help="size compacted files aim at")
    maintain.add_argument("--min-files", type=int, help="compact a partition with at least this many small files")
    maintain.add_argument("--dry-run", action="store_true", help="plan only; show what vacuum would delete")
    maintain.add_argument("--json", action="store_true", help="print the report as JSON")
    maintain.set_defaults(func=_maintain)

    validate = sub.add_parser("validate", help="reconcile the tables with Kafka and the checkpoint, check the rows: "
                              "one validate_output run (exit 0: passed; 82, 81, 83, 75: found something)")
    validate.add_argument("--table", action="append", help="a table whose rows the expectations check (repeatable)")
    validate.add_argument("--check", action="append", help="coverage, checkpoint, kafka, audit, exposure, "
                          "expectations or content (repeatable; default: all)")
    validate.add_argument("--version", action="append", metavar="TABLE=N",
                          help="check this version of a table (repeat for each table)")
    validate.add_argument("--as-of", default="", help="check the tables as they were at this ISO 8601 time")
    validate.add_argument("--rows", choices=("new", "all"), default="new",
                          help="rows the expectations check: new (committed since the last validated version) or all")
    validate.add_argument("--json", action="store_true", help="print the report's summary as JSON")
    validate.set_defaults(func=_validate)
    up = sub.add_parser("up", help="run the whole local platform (broker, producer, Airflow, stream)")
    platform_up.add_arguments(up)
    up.set_defaults(func=_up)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. Every setting (the stream's and the warden's) is checked before anything starts:
    invalid ones exit 78 (CONFIG) with one message per problem, secrets masked."""
    os.umask(0o077)  # everything the platform writes (run files, logs, Airflow's home) is the owner's only
    args = build_parser().parse_args(argv)
    if args.command == "stream":
        return _stream(args.standby)
    if args.command == "stream-host-session":  # the command it runs checks the settings
        from streamwarden.stream_host.gate import run_session

        return run_session(args.env_file)
    command: Command = args.func
    try:
        settings = load_settings()
        load_warden_settings()
        if args.command == "up" and settings.pipeline == "sessions":
            load_checked_handler(settings.session_handler, TableSchema.parse(settings.table_schema))
        return command(settings, args)
    except SettingsError as exc:
        print(f"streamwarden: {exc}", file=sys.stderr)
        return EXIT_CODES[FailureClass.CONFIG]
    except StreamwardenError as exc:
        print(scrub(f"streamwarden: {exc.failure_class.value}: {exc.message}"), file=sys.stderr)
        return EXIT_CODES[exc.failure_class]


if __name__ == "__main__":
    sys.exit(main())
