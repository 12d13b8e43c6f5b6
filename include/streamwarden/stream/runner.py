"""``streamwarden stream``: the long-running job, with its lease, drain and classified exit.

Lifecycle: take the checkpoint lease (or exit 73) -> clear a stale stop marker -> start the query with
the heartbeat listener -> wait; when the stop marker appears, drain (the source plans nothing new,
the running batch commits) and exit 0 -> on any failure write ``last_failure.json`` and exit with the
code of its class. A warm standby (``--standby``, :mod:`.standby`) starts its Spark session first and waits
for the lease; once it holds it, it runs the same lifecycle.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from streamwarden.failures import (
    EXIT_ALREADY_RUNNING,
    EXIT_CODES,
    EnvironmentFailure,
    FailureClass,
    FailureDocument,
    classify,
)
from streamwarden.logs.bounds import LogBounds
from streamwarden.logs.log4j2 import write_log4j2_config
from streamwarden.logs.python_logging import configure_job_logging
from streamwarden.runfiles.checkpoint import commit_batches, offset_batches
from streamwarden.runfiles.failure_file import write_failure
from streamwarden.runfiles.handler_pin import check_pinned
from streamwarden.runfiles.lease import CheckpointLease, LeaseHeldError, LeaseHolder
from streamwarden.secrets import scrub
from streamwarden.session_handler import load_checked_handler
from streamwarden.settings import Settings, load_settings
from streamwarden.settings_loading import ENV_PREFIX, SettingsError
from streamwarden.wire import TableSchema

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger("streamwarden.stream.runner")


def run_stream_from_environment(standby: bool = False) -> int:
    """Load the settings and run; invalid settings are a documented CONFIG failure, not a silent exit.

    The warden decides from ``last_failure.json``: without it a bad setting would look like a dead
    stream and be restarted until the circuit breaker trips. The run root is then taken from
    ``STREAMWARDEN_RUN_ROOT`` or ``STREAMWARDEN_HOME`` as far as they can be read.
    """
    os.umask(0o077)  # run files, logs and output are the owner's only
    try:
        settings = load_settings()
    except SettingsError as exc:
        print(f"streamwarden: {exc}", file=sys.stderr)
        home = Path(os.environ.get(f"{ENV_PREFIX}HOME") or ".streamwarden")
        run_root = Path(os.environ.get(f"{ENV_PREFIX}RUN_ROOT") or home / "run")
        document = FailureDocument(FailureClass.CONFIG, str(exc), EXIT_CODES[FailureClass.CONFIG])
        try:
            write_failure(run_root / "last_failure.json", document)
        except OSError as error:
            print(f"streamwarden: the failure document cannot be written under {run_root}: {error.strerror}",
                  file=sys.stderr)
        return document.exit_code
    return run_stream(settings, standby=standby)


def run_stream(settings: Settings, standby: bool = False) -> int:
    """Run the stream in the foreground until stopped or failed; returns the process exit code. A standby
    waits for the lease first, its Spark session started."""
    lease = CheckpointLease(settings.lease_path, settings.checkpoint_location)
    spark = None
    try:
        if standby:
            spark, taken = _stand_by(settings, lease)
            if taken is None:
                return 0
            holder = taken
        else:
            holder = lease.acquire()
    except LeaseHeldError as exc:
        print(f"streamwarden: {exc}", file=sys.stderr)
        return EXIT_ALREADY_RUNNING
    except Exception as exc:  # a standby that failed before the takeover: no failure document, the stream runs
        document = classify(exc)
        log.error("standby failed before taking the lease (%s, exit %d): %s", document.failure_class,
                  document.exit_code, scrub(document.message))
        return document.exit_code
    configure_job_logging(LogBounds.of(settings), py4j_info=settings.log_py4j)  # the holder alone rolls them
    log.info("lease taken: %s", holder)
    try:
        settings.run_paths.stop_marker.unlink(missing_ok=True)
        if settings.run_paths.failure.exists():
            settings.run_paths.failure.replace(settings.run_paths.previous_failure)
        check_before_spark(settings)
        return _run(settings, spark)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            log.warning("interrupted")
            return 130
        document = classify(exc)
        write_failure(settings.run_paths.failure, document)
        log.error("stream failed (%s, exit %d): %s", document.failure_class, document.exit_code,
                  scrub(document.message))
        return document.exit_code
    finally:
        lease.release()


BROKER_LOOK_S = 30.0
"""The longest the look at the broker before Spark starts waits for an answer (or ``broker_timeout`` if less)."""


def check_before_spark(settings: Settings) -> None:
    """What can be checked without Spark, checked before Spark starts: the session handler loads, implements
    the interface, its columns do not clash with the framework's (a CONFIG failure, not a BUG later), and its
    state layout is the one the checkpoint pinned (the same refusal as once Spark runs, in a second); the
    broker answers a metadata request (ENVIRONMENT in one line, instead of Java and Python tracebacks once
    Spark has started; the warden restarts the stream with its backoff)."""
    if settings.pipeline == "sessions":
        handler, _ = load_checked_handler(settings.session_handler, TableSchema.parse(settings.table_schema))
        check_pinned(settings.checkpoint_location, handler, settings.session_buckets, settings.state_buckets,
                     slots=settings.session_slots, partitions=settings.state_partitions)
    look_at_broker(settings, timeout=min(BROKER_LOOK_S, settings.broker_timeout))


def look_at_broker(settings: Settings, timeout: float) -> None:
    """One metadata request to the broker, answered within ``timeout`` seconds, or :class:`EnvironmentFailure`."""
    from confluent_kafka import KafkaException

    from streamwarden.kafka.admin import metadata_consumer

    consumer = metadata_consumer(settings.kafka_client_config())
    try:
        consumer.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise EnvironmentFailure(
            f"the broker at {settings.bootstrap_servers} did not answer within {timeout:.0f}s before the stream "
            f"started ({exc.args[0].str() if exc.args else exc}): check STREAMWARDEN_BOOTSTRAP_SERVERS and that "
            "the broker is up") from None
    finally:
        consumer.close()


def _stand_by(settings: Settings, lease: CheckpointLease) -> tuple[SparkSession, LeaseHolder | None]:
    """The standby's Spark session (the JVM, the session, the job's modules: what a start spends its first
    seconds on), then the wait for the lease. A standby that fails before it takes the lease writes no failure
    document: the stream it stands by for is not failed."""
    from streamwarden.stream.pipeline import register_source  # the pipeline imported while waiting
    from streamwarden.stream.spark_session import build_spark_session
    from streamwarden.stream.standby import wait_to_take_over

    started = time.monotonic()
    spark = build_spark_session(settings)
    try:
        check_before_spark(settings)  # the handler and the broker's client imported now; checked again on taking over
        _warm_python_workers(spark)
        register_source(spark, settings)
        log.info("standby: Spark session and Python workers ready in %.1fs", time.monotonic() - started)
        taken = wait_to_take_over(settings, lease)
    except BaseException:
        spark.stop()
        raise
    if taken is None:
        spark.stop()
    return spark, taken


def _warm_python_workers(spark: SparkSession) -> None:
    """Start the Python worker daemon and a worker per core through an Arrow UDF, as the first batch would: the
    daemon imports the workers' modules once (``worker_daemon``), and the workers are reused by the batches."""
    slots = spark.sparkContext.defaultParallelism
    spark.range(slots, numPartitions=slots).mapInArrow(lambda batches: batches, "id long").collect()


def _run(settings: Settings, spark: SparkSession | None = None) -> int:
    from streamwarden.stream.listener import HeartbeatListener
    from streamwarden.stream.pipeline import start_query
    from streamwarden.stream.spark_session import build_spark_session, route_jvm_logs

    spark = spark or build_spark_session(settings)
    route_jvm_logs(spark, write_log4j2_config(LogBounds.of(settings)))
    spark.streams.addListener(HeartbeatListener(settings.run_paths.heartbeat, settings.trigger_interval,
                                                settings.checkpoint_location))
    query = start_query(spark, settings)
    log.info("query %s started (run %s)", query.id, query.runId)
    try:
        while query.isActive:
            if settings.run_paths.stop_marker.exists():
                _drain(query, settings)
                settings.run_paths.stop_marker.unlink(missing_ok=True)
                log.info("drained and stopped")
                return 0
            query.awaitTermination(1)
        error = query.exception()
        if error is not None:
            raise error
        return 0
    finally:
        if query.isActive:
            query.stop()
        spark.stop()


def _drain(query: StreamingQuery, settings: Settings, timeout: float = 600.0) -> None:
    """Let the running batch commit, then stop; no new offsets are planned once the marker exists.

    Quiet means: no trigger active, and the checkpoint's last planned batch is committed, seen on three
    polls in a row and at least one trigger interval after the marker appeared.
    """
    log.info("stop marker found: draining")
    checkpoint = settings.checkpoint_location
    earliest_stop = time.monotonic() + settings.trigger_interval
    deadline = time.monotonic() + timeout
    quiet = 0
    while query.isActive and time.monotonic() < deadline:
        planned, committed = offset_batches(checkpoint), commit_batches(checkpoint)
        settled = not planned or (bool(committed) and committed[-1] == planned[-1])
        quiet = quiet + 1 if settled and not query.status["isTriggerActive"] else 0
        if quiet >= 3 and time.monotonic() >= earliest_stop:
            break
        time.sleep(0.5)
    else:
        if query.isActive:
            log.warning("drain did not settle within %.0fs; stopping anyway (the batch will be replayed)",
                        timeout)
    query.stop()
