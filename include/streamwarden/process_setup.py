"""What the stream's processes must be given before they start: the driver's heap, its JIT and collector, malloc.

Imports no pyspark: the warden gives these to spark-submit (:func:`launch_env`), and the job's Spark
configuration (:func:`~streamwarden.stream.spark_session.spark_conf`) names the same values.
"""

from __future__ import annotations

from collections.abc import Mapping

from streamwarden.settings import Settings

DRIVER_MEMORY = "640m"
"""The driver JVM's heap. On one machine the driver is also the executor: the work is in the Python workers and
RocksDB, off the heap (docs/tuning.md)."""
DRIVER_JAVA_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-XX:+AlwaysPreTouch")
"""The driver JVM's compiler, collector and heap (figures in docs/tuning.md):

- the quick compiler only: a micro-batch runs much of Spark's code once, and the optimizing compiler (C2) spent
  the JVM's CPU compiling it batch after batch while the tasks ran no faster;
- the serial collector: no concurrent marking threads and barriers on a heap this small;
- the heap its full size from the start, every page touched (``AlwaysPreTouch``, and ``-Xms`` equal to the
  driver memory, which :func:`launch_env` adds): the JVM's RSS is fixed from the first batch, so a leak shows,
  and a driver that does not fit its machine fails at start (a heap grown on demand climbed for hours as
  short-lived garbage was promoted)."""
MALLOC = {"MALLOC_ARENA_MAX": "2", "MALLOC_MMAP_THRESHOLD_": str(2**20)}
"""glibc's malloc in the driver JVM and every Python process of the stream (figures in docs/tuning.md):

- ``MALLOC_ARENA_MAX``: 2 arenas per process instead of 8 per core: with an arena per allocating thread,
  RocksDB's and Arrow's threads left freed memory spread over many arenas, never handed back;
- ``MALLOC_MMAP_THRESHOLD_``: a block of 1 MiB or more (Arrow buffers, IPC payloads) is mapped on its own and
  unmapped when freed; glibc's default raises that threshold after each large free, up to 32 MiB, so a Python
  worker's heap kept its largest batch.
"""


def launch_env(settings: Settings, base: Mapping[str, str]) -> dict[str, str]:
    """What ``spark-submit`` must be given in its environment, because it is read before the job runs.

    In client mode spark-submit starts the driver's JVM before ``jobs/stream.py`` builds its session, so the
    heap set there (``spark.driver.memory`` in :func:`~streamwarden.stream.spark_session.spark_conf`) would be
    silently ignored (the JVM ran with spark-submit's 1 GiB default). ``SPARK_DRIVER_MEMORY`` is what
    spark-submit reads when its command line does not name one (a Spark connection's ``--driver-memory`` still
    wins). ``SPARK_SUBMIT_OPTS`` carries :func:`driver_java_options` to the driver's JVM (a connection's
    ``spark.driver.extraJavaOptions`` come after them, so they win, but must not name another collector: the JVM
    refuses two). :data:`MALLOC` reaches the driver JVM and the Python processes it starts. A value in ``base``
    (the operator's environment) is kept: an operator's ``SPARK_SUBMIT_OPTS`` replaces the driver's options.
    """
    memory = settings.spark_conf.get("spark.driver.memory", DRIVER_MEMORY)
    defaults = {"SPARK_SUBMIT_OPTS": " ".join(driver_java_options(memory)), **MALLOC}
    return {"SPARK_DRIVER_MEMORY": memory, **{name: base.get(name, value) for name, value in defaults.items()}}


def driver_java_options(memory: str) -> tuple[str, ...]:
    """:data:`DRIVER_JAVA_OPTIONS` for a driver of ``memory`` (Spark's form, ``640m``, ``2g``: the JVM's too)."""
    return (*DRIVER_JAVA_OPTIONS, f"-Xms{memory}")
