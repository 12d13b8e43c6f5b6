"""The job's PySpark daemon (``streamwarden.stream.worker_daemon``): Python workers forked with the job's modules
already imported, from a daemon that is single-threaded when it forks; PySpark's own daemon when it is not."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from fixtures import REPO

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import SparkSession

DAEMON = "streamwarden.stream.worker_daemon"


def test_workers_are_forked_from_a_single_threaded_daemon_with_the_jobs_modules_imported(
        spark: SparkSession) -> None:
    def look(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        import os as here
        import sys as imported

        parent = here.getppid()
        with open(f"/proc/{parent}/cmdline", "rb") as command:
            daemon = command.read().replace(b"\0", b" ").decode()
        for frame in frames:
            yield frame.assign(daemon=daemon, daemon_threads=len(here.listdir(f"/proc/{parent}/task")),
                               preloaded=all(name in imported.modules for name in (
                                   "streamwarden.stream.sessions.processor", "streamwarden.stream.sink.batch_files",
                                   "streamwarden.stream.source.kafka_source", "pyarrow.parquet")))

    rows = spark.range(4).repartition(2).mapInPandas(
        look, "id long, daemon string, daemon_threads long, preloaded boolean").collect()
    assert {(DAEMON in row.daemon, row.daemon_threads, row.preloaded) for row in rows} == {(True, 1, True)}, rows


def test_a_daemon_left_with_a_second_thread_becomes_pysparks_own_before_it_answers() -> None:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "2", "PYTHONPATH": str(REPO / "include")}  # numpy starts one
    daemon = subprocess.Popen([sys.executable, "-m", DAEMON, "pyspark.worker"], env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert daemon.stdout is not None and daemon.stdin is not None and daemon.stderr is not None
        (port,) = struct.unpack(">i", daemon.stdout.read(4))  # PySpark's daemon tells the JVM its port
        command = Path(f"/proc/{daemon.pid}/cmdline").read_bytes().split(b"\0")
        daemon.stdin.close()  # the JVM closing its pipe stops the daemon
        daemon.wait(30)
        said = daemon.stderr.read().decode()
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
    assert port > 0
    assert command[1:4] == [b"-m", b"pyspark.daemon", b"pyspark.worker"], command
    assert "threads after the imports; running PySpark's own daemon" in said, said
