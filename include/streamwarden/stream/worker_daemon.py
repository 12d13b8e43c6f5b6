"""The job's PySpark daemon: PySpark's own, started with the workers' modules already imported.

PySpark forks a Python worker from its daemon for every worker it needs, and each worker then imports PySpark's
worker, pandas, pyarrow and the job's modules on its own: 1.2-2 CPU-seconds each (measured on 2 cores, bytecode
compiled), paid again by every worker of every job start, while a worker's task of a short batch takes less.
This daemon (``spark.python.daemon.module``) imports them once, freezes the objects they made out of later
garbage collections (:func:`gc.freeze`, as CPython advises before a fork: the children share those pages and
never walk them), and then runs PySpark's ``manager`` unchanged.

PySpark imports the worker's modules after the fork on purpose: a process forked while another thread holds a
lock can deadlock in the child, and three of these libraries start threads at import: numpy's BLAS pool, and
the background purging threads of the jemalloc that pyarrow and deltalake each carry. So the BLAS and OpenMP
pools are held to one thread (the workers do no linear algebra) and both jemallocs purge without a background
thread (the workers' Arrow buffers use the system allocator anyway: ``ARROW_DEFAULT_MEMORY_POOL``), all set
before the imports, and the daemon forks only while it is the process's single thread: if the imports left any
other thread, it replaces itself with PySpark's plain daemon (same process, nothing written to the JVM yet),
which imports after the fork as before.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys

PRELOAD = (
    "pyspark.worker",
    "pyspark.sql.pandas.serializers",
    "pandas",
    "pyarrow",
    "pyarrow.parquet",
    "streamwarden.stream.source.kafka_source",
    "streamwarden.stream.sessions.packing",
    "streamwarden.stream.sessions.processor",
    "streamwarden.stream.sink.batch_files",
)
"""What a worker of the job imports (PySpark's worker and Arrow serializers, pandas, pyarrow, the functions the
job hands Spark); a module that cannot be imported here is left to the worker, which fails as it would have."""

ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
"""Thread pools held to one thread (an operator's own value is kept; the daemon then checks the threads it finds)."""
NO_BACKGROUND_THREAD = ("JE_ARROW_MALLOC_CONF", "_RJEM_MALLOC_CONF")  # pyarrow's jemalloc, deltalake's
"""jemalloc settings that get ``background_thread:false`` after whatever they already hold (a later option wins):
polars, imported by the driver, sets ``_RJEM_MALLOC_CONF`` for its process, and the daemon inherits it."""


def threads() -> int:
    """The operating system threads of this process."""
    return len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else 1


def preload(modules: tuple[str, ...] = PRELOAD) -> list[str]:
    """Import ``modules`` with :data:`ONE_THREAD` and :data:`NO_BACKGROUND_THREAD` set; the names of those that
    failed."""
    for name, value in ONE_THREAD.items():
        os.environ.setdefault(name, value)
    for name in NO_BACKGROUND_THREAD:
        os.environ[name] = ",".join(filter(None, (os.environ.get(name), "background_thread:false")))
    failed = []
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception:  # the worker imports it again and reports its own error
            failed.append(module)
    return failed


def main() -> None:
    """Preload, then serve as PySpark's daemon; PySpark's plain daemon when a thread would be forked with."""
    failed = preload()
    if failed:
        print(f"streamwarden worker daemon: not preloaded (each worker imports them): {', '.join(failed)}",
              file=sys.stderr, flush=True)
    if threads() > 1:
        print(f"streamwarden worker daemon: {threads()} threads after the imports; running PySpark's own daemon "
              "(workers import after the fork)", file=sys.stderr, flush=True)
        os.execv(sys.executable, [sys.executable, "-m", "pyspark.daemon", *sys.argv[1:]])
    gc.collect()
    gc.freeze()
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
