"""The test run's JVM options: Spark's classes from a class-data-sharing archive, and the JIT's first tier only.

Nearly every drill starts Spark JVMs (the stream's job processes, the warden's restarts, ``up``, Airflow's
tasks), most of them for a minute or two. On 2 cores such a JVM's start-up is class loading and the C2
compiler's threads: a small local job took 29-36 s of the JVM's CPU as it is, 18 s with C1 only and 11 s
with C1 and an archive of the classes it loaded. The tests check behaviour, not the JIT; production keeps the
JVM's defaults.

``JAVA_TOOL_OPTIONS`` carries the options, so that every JVM the run starts (through the job processes,
Airflow's servers and ``up``, which inherit the test run's environment) takes them before its command line:
the stream driver's own options (``SPARK_SUBMIT_OPTS``, the collector, the heap) stay what production runs.
The JVMs' warnings go to stderr, since spark-submit's launcher JVM (another class path: it cannot use the
archive, and would say so) answers on stdout, and the archive's messages are errors only. The archive is made once
per machine, Java and Spark by a short job that loads the classes the stream loads (SQL, a stateful stream on
RocksDB, Arrow to Python workers); without one (it could not be made), the JVMs start without it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

C1_ONLY = "-XX:TieredStopAtLevel=1"
QUIET = "-Xlog:disable -Xlog:all=warning:stderr -Xlog:cds=error:stderr -Xlog:cds+dynamic=error:stderr"

_LOADER = r"""
import sys
import pandas as pd
from pyspark.sql import SparkSession

folder = sys.argv[1]
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2").config("spark.sql.execution.arrow.pyspark.enabled", "true")
         .config("spark.sql.streaming.stateStore.providerClass",
                 "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider").getOrCreate())
frame = spark.createDataFrame(pd.DataFrame({"k": [i % 7 for i in range(500)], "v": list(range(500))}))
frame.write.mode("overwrite").parquet(f"{folder}/in")
frame.groupBy("k").applyInPandas(lambda p: p.head(1), "k long, v long").collect()
counts = (spark.readStream.schema(frame.schema).parquet(f"{folder}/in").groupBy("k").count().writeStream
          .outputMode("update").option("checkpointLocation", f"{folder}/checkpoint")
          .foreachBatch(lambda batch, _: batch.toPandas()).trigger(availableNow=True).start())
counts.awaitTermination()
spark.stop()
"""


def _archive_path() -> Path:
    """Where this machine's archive for this Java and this Spark lives (a change of either makes another)."""
    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False).stderr
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    key = hashlib.sha256("\n".join([java, str(jars), *sorted(p.name for p in jars.glob("*.jar"))]).encode())
    return Path(tempfile.gettempdir()) / f"streamwarden-tests-spark-{key.hexdigest()[:16]}.jsa"


def _make_archive(archive: Path) -> bool:
    """Run the loader job with ``-XX:ArchiveClassesAtExit``; True when the archive is there."""
    with tempfile.TemporaryDirectory(prefix="sw-jvm-archive-") as folder:
        partial = Path(folder) / "classes.jsa"
        env = {**os.environ, "SPARK_SUBMIT_OPTS": f"{C1_ONLY} -XX:ArchiveClassesAtExit={partial}",
               "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
        done = subprocess.run([sys.executable, "-c", _LOADER, folder], env=env, capture_output=True, check=False,
                              timeout=600)
        if done.returncode != 0 or not partial.exists():
            return False
        os.replace(partial, archive)
    return True


def jvm_options() -> str:
    """The options for the test run's JVMs, making the archive first if this machine has none yet."""
    archive = _archive_path()
    with open(archive.with_suffix(".lock"), "w") as lock:  # concurrent test runs make it once
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not archive.exists() and not _make_archive(archive):
            return f"{C1_ONLY} {QUIET}"
    return f"{C1_ONLY} -XX:SharedArchiveFile={archive} {QUIET}"
