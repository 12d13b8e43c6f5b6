"""The one place a SparkSession is configured for Streamwarden."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamwarden.process_setup import DRIVER_MEMORY, MALLOC
from streamwarden.settings import Settings

ARROW_BATCH_BYTES = 4 * 1024 * 1024
"""The most bytes of rows the JVM puts in one Arrow batch for a Python worker (docs/tuning.md)."""

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def spark_conf(settings: Settings) -> dict[str, str]:
    """Spark configuration for the stream; ``settings.spark_conf`` overrides any of it."""
    conf = {
        "spark.driver.memory": DRIVER_MEMORY,
        "spark.sql.shuffle.partitions": str(settings.state_partitions),
        "spark.default.parallelism": str(settings.state_partitions),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.streaming.stateStore.providerClass":
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        "spark.sql.streaming.stateStore.rocksdb.boundedMemoryUsage": "true",
        # Block cache and memtables of all state stores of the process together: more grew the JVM and ran no
        # faster (docs/tuning.md).
        "spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB": "128",
        "spark.sql.streaming.stateStore.encodingFormat": "avro",
        # A state commit uploads the batch's changes, not a snapshot of the store (snapshots are made in the
        # background; docs/tuning.md). Spark reads either layout of a checkpoint, so existing checkpoints take
        # it too, and can go back.
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # Python workers are forked with their modules already imported (worker_daemon.py).
        "spark.python.daemon.module": "streamwarden.stream.worker_daemon",
        # The rows going to a Python worker are sent in Arrow batches of at most 10,000 rows by default, and
        # the packed rows are few and large (an IPC payload each): the JVM gathered a task's whole output for
        # the batch writer before it sent any, in the heap and in Arrow's buffers, which keep their largest
        # size. A bound in bytes streams it instead (docs/tuning.md).
        "spark.sql.execution.arrow.maxBytesPerBatch": str(ARROW_BATCH_BYTES),
        # Python workers allocate Arrow buffers with malloc, which hands freed memory back; Arrow's jemalloc
        # pool kept it (docs/tuning.md).
        "spark.executorEnv.ARROW_DEFAULT_MEMORY_POOL": "system",
        **{f"spark.executorEnv.{name}": value for name, value in MALLOC.items()},
        "spark.local.dir": str(settings.root("state") / "spark-local"),
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.streaming.metricsEnabled": "true",
        # transformWithState in ProcessingTime mode (needed for the TTL session timeout) would otherwise
        # run an empty micro-batch every trigger, forever: CPU burnt while idle and no idle events for
        # the heartbeat. TTL is still enforced on the next batch with data.
        "spark.sql.streaming.noDataMicroBatches.enabled": "false",
        # Hadoop's file system ignores the process umask (its default is 022): output, checkpoint and
        # state files are the owner's only, like everything else under the home.
        "spark.hadoop.fs.permissions.umask-mode": "077",
        # The checkpoint is a local folder. Spark's default checkpoint file manager goes through Hadoop's
        # FileContext, whose local file system runs the `readlink` command for every status check when
        # Hadoop's native library is absent (as in PySpark's jars): ~8 child processes of the JVM per file
        # written, 20-40 ms for each offset and commit log entry and 80 ms for a task's state commit. The
        # FileSystem-based manager writes the same files (temporary file, then rename) without them.
        "spark.sql.streaming.checkpointFileManagerClass":
            "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
        # Delta tables and every Parquet reader want TIMESTAMP_MICROS (with statistics), not INT96.
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        # Executors on a standalone cluster log to their worker's folder: the worker rolls those logs too.
        "spark.executor.logs.rolling.strategy": "size",
        "spark.executor.logs.rolling.maxSize": str(settings.log_max_bytes),
        "spark.executor.logs.rolling.maxRetainedFiles": str(settings.log_backups),
    }
    conf.update(settings.spark_conf)
    return conf


def build_spark_session(settings: Settings, app_name: str = "streamwarden") -> SparkSession:
    """Get or create the session; Python workers run on this interpreter (see NOTES: PYSPARK_PYTHON)."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if settings.spark_master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # a local run listens on loopback only
    builder = SparkSession.builder.appName(app_name).master(settings.spark_master)
    for key, value in spark_conf(settings).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session


def route_jvm_logs(session: SparkSession, config: Path) -> None:
    """Reconfigure the driver JVM's log4j2 from the properties file ``config``.

    Done from the running session because spark-submit starts the driver JVM before the job runs, so no
    Spark setting the job makes could name the file in time; only the JVM's start-up lines precede it.
    """
    jvm: Any = session.sparkContext._jvm
    jvm.org.apache.logging.log4j.core.config.Configurator.reconfigure(jvm.java.net.URI(config.as_uri()))
