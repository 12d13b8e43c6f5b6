"""What the stream's processes must be given before they start: the driver's heap, its JIT and collector, malloc.

Imports no pyspark: the warden gives these to spark-submit (:func:`launch_env`), and the job's Spark
configuration (:func:`~streamwarden.stream.spark_session.spark_conf`) names the same values.
"""

from __future__ import annotations

from collections.abc import Mapping

from streamwarden.settings import Settings

DRIVER_MEMORY = "640m"
"""The driver JVM's heap. On one machine the driver is also the executor: the work is in the Python workers and
RocksDB (off the heap), and the 2M-message benchmark ran as fast at 640 MiB as at 1 GiB."""
DRIVER_JAVA_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-XX:MinHeapFreeRatio=10")
"""The driver JVM's compiler, collector and heap growth (docs/benchmarks.md, tenth and eleventh passes).

- A micro-batch runs much of Spark's code once (analysis, optimization, planning, the progress events): the
  JVM's optimizing compiler (C2) was still compiling after 18 batches, 44% of the JVM's CPU over batches 3-18 at
  100k-record batches on 2 cores. The quick compiler alone (C1) cost 0.03 core-seconds a batch where C2 had
  cost 0.43, and the tasks' own threads ran as fast.
- The serial collector does without G1's concurrent marking threads and barriers on a heap this small (the
  JVM's CPU over those batches 14.8 -> 9.4 -> 7.9 core-seconds).
- The heap grows past its initial size only when a full collection leaves less than 10% of it free (40% by
  default): at 200k sessions the committed heap had grown 378 -> 613 MiB on short-lived garbage."""
MALLOC = {"MALLOC_ARENA_MAX": "2", "MALLOC_MMAP_THRESHOLD_": str(2**20)}
"""glibc's malloc in the driver JVM and every Python process of the stream. Measured in the 2M-message and the
200k-session benchmarks (docs/benchmarks.md, sixth pass):

- ``MALLOC_ARENA_MAX``: 2 arenas per process instead of 8 per core. With an arena per allocating thread,
  RocksDB's and Arrow's threads left freed memory spread over many arenas, never handed back (peak RSS at
  200k sessions 4.66 -> 4.18 GiB, throughput unchanged).
- ``MALLOC_MMAP_THRESHOLD_``: a block of 1 MiB or more (Arrow buffers, IPC payloads) is mapped on its own
  and unmapped when freed. glibc's default raises that threshold after each large free, up to 32 MiB, so a
  Python worker's heap kept its largest batch (the workers' peak RSS in the 2M-message run 1.68 -> 1.30 GiB;
  ~5% of the throughput, the page faults of fresh mappings).
"""


def launch_env(settings: Settings, base: Mapping[str, str]) -> dict[str, str]:
    """What ``spark-submit`` must be given in its environment, because it is read before the job runs.

    In client mode spark-submit starts the driver's JVM before ``jobs/stream.py`` builds its session, so the
    heap set there (``spark.driver.memory`` in :func:`~streamwarden.stream.spark_session.spark_conf`) would be
    silently ignored (the JVM ran with spark-submit's 1 GiB default). ``SPARK_DRIVER_MEMORY`` is what
    spark-submit reads when its command line does not name one (a Spark connection's ``--driver-memory`` still
    wins). ``SPARK_SUBMIT_OPTS`` carries :data:`DRIVER_JAVA_OPTIONS` to the driver's JVM (a connection's
    ``spark.driver.extraJavaOptions`` come after them, so they win, but must not name another collector: the JVM
    refuses two). :data:`MALLOC` reaches the driver JVM and the Python processes it starts. A value in ``base``
    (the operator's environment) is kept: an operator's ``SPARK_SUBMIT_OPTS`` replaces the driver's options.
    """
    defaults = {"SPARK_SUBMIT_OPTS": " ".join(DRIVER_JAVA_OPTIONS), **MALLOC}
    return {"SPARK_DRIVER_MEMORY": settings.spark_conf.get("spark.driver.memory", DRIVER_MEMORY),
            **{name: base.get(name, value) for name, value in defaults.items()}}
