"""The job's PySpark daemon (``streamwarden.stream.worker_daemon``): Python workers forked with the job's modules
already imported, from a daemon that is single-threaded when it forks; PySpark's own daemon when it is not."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

from fixtures import REPO

DAEMON = "streamwarden.stream.worker_daemon"


PROBE = """
import json, sys
from streamwarden.settings import load_settings
from streamwarden.stream.spark_session import build_spark_session

def look(frames):
    import os, sys as imported
    parent = os.getppid()
    with open(f"/proc/{parent}/cmdline", "rb") as command:
        daemon = command.read().replace(b"\\0", b" ").decode()
    preloaded = all(name in imported.modules for name in (
        "streamwarden.stream.sessions.processor", "streamwarden.stream.sink.batch_files",
        "streamwarden.stream.source.kafka_source", "pyarrow.parquet"))
    for frame in frames:
        yield frame.assign(daemon=daemon, daemon_threads=len(os.listdir(f"/proc/{parent}/task")), preloaded=preloaded)

spark = build_spark_session(load_settings(home=sys.argv[1], spark_master="local[2]", shuffle_partitions=2))
rows = spark.range(4).repartition(2).mapInPandas(
    look, "id long, daemon string, daemon_threads long, preloaded boolean").collect()
print("PROBE " + json.dumps(sorted({(r.daemon, r.daemon_threads, r.preloaded) for r in rows})))
spark.stop()
"""


def test_a_new_sessions_workers_are_forked_from_a_single_threaded_daemon_with_the_jobs_modules_imported(
        tmp_path: Path) -> None:
    # its own process: a session already made in this one (another test's) would keep the configuration it had;
    # with the jemalloc setting polars gives its process (the test run's and the job's drivers import polars)
    env = {**os.environ, "_RJEM_MALLOC_CONF": "dirty_decay_ms:500,muzzy_decay_ms:1000"}
    done = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path / "home")], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("PROBE ")]
    assert done.returncode == 0 and lines, done.stdout[-2000:] + done.stderr[-3000:]
    seen = json.loads(lines[0].removeprefix("PROBE "))
    assert [(DAEMON in daemon, threads, preloaded) for daemon, threads, preloaded in seen] == [(True, 1, True)], (
        seen, done.stderr[-3000:])


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
