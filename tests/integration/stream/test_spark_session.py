"""The stream's Spark session writes its checkpoint through a file manager that spawns few child processes.

Hadoop's local file system runs a command (``chmod``, ``readlink``) where its native library would make a
system call; PySpark's jars come without that library. Spark's default checkpoint file manager (FileContext)
checks a path's status with ``readlink`` several times per file; the job's manager does not. Processes are
counted with the kernel's fork counter (``/proc/stat``), for the same files written by each manager.
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

FILES = 20


def _forks() -> int:
    """Processes created on this machine since boot."""
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("processes "):
            return int(line.split()[1])
    raise AssertionError("/proc/stat has no 'processes' line")


def _write_log_entries(spark: SparkSession, manager: Any, folder: Path) -> int:
    """Write :data:`FILES` entries the way Spark writes its offset log (temporary file, then rename); the
    processes created meanwhile."""
    jvm: Any = spark.sparkContext._jvm
    before = _forks()
    for batch in range(FILES):
        out = manager.createAtomic(jvm.org.apache.hadoop.fs.Path(str(folder / str(batch))), False)
        out.write(b'{"batchWatermarkMs":0}')
        out.close()
    return _forks() - before


def test_the_checkpoint_is_written_with_a_fifth_of_the_child_processes_and_stays_the_owners(
        spark: SparkSession, tmp_path: Path) -> None:
    jvm: Any = spark.sparkContext._jvm
    hadoop_conf = spark._jsparkSession.sessionState().newHadoopConf()  # type: ignore[attr-defined]
    managers = jvm.org.apache.spark.sql.execution.streaming.checkpointing
    ours, default = tmp_path / "ours", tmp_path / "default"
    default.mkdir()
    manager = managers.CheckpointFileManager.create(jvm.org.apache.hadoop.fs.Path(str(ours)), hadoop_conf)
    assert manager.getClass().getSimpleName() == "FileSystemBasedCheckpointFileManager"
    ours_forks = _write_log_entries(spark, manager, ours)
    default_forks = _write_log_entries(
        spark, managers.FileContextBasedCheckpointFileManager(jvm.org.apache.hadoop.fs.Path(str(default)),
                                                              hadoop_conf), default)
    assert default_forks >= 8 * FILES  # readlink, again and again, for every file
    assert ours_forks * 3 < default_forks, (ours_forks, default_forks)
    written = sorted(path.name for path in ours.iterdir() if not path.name.startswith("."))
    assert written == sorted(str(batch) for batch in range(FILES))  # every entry at its final name
    assert {stat.S_IMODE(path.stat().st_mode) for path in ours.iterdir()} == {0o600}
