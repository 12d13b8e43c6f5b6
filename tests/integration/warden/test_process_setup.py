"""spark-submit, started with the stream's environment, runs the driver with the settings' heap, the driver's
compiler and collector, and malloc.

In client mode spark-submit starts the driver's JVM before the job builds its session, so a heap given only
in the session's configuration is ignored; the launcher hands it to spark-submit in its environment.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from streamwarden.process_setup import DRIVER_JAVA_OPTIONS, DRIVER_MEMORY, MALLOC
from streamwarden.settings import load_settings
from streamwarden.warden.launcher import platform_env, stream_env, venv_bin

PROBE = '''
import json
import sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
jvm = spark.sparkContext._jvm
management = jvm.java.lang.management.ManagementFactory
hotspot = management.getPlatformMXBean(jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean"))
print("PROBE " + json.dumps({"max_heap": jvm.java.lang.Runtime.getRuntime().maxMemory(),
                             "collectors": [bean.getName() for bean in management.getGarbageCollectorMXBeans()],
                             "tiered_stop_at_level": hotspot.getVMOption("TieredStopAtLevel").getValue(),
                             "committed_heap": jvm.java.lang.Runtime.getRuntime().totalMemory(),
                             "always_pre_touch": hotspot.getVMOption("AlwaysPreTouch").getValue(),
                             "malloc": {name: jvm.java.lang.System.getenv(name) for name in sys.argv[1:]}}))
spark.stop()
'''


def _driver(tmp_path: Path, env: dict[str, str]) -> dict[str, object]:
    """What the driver JVM of ``spark-submit`` started with ``env`` reports: its maximum heap, its collectors, the
    highest tier its compiler goes to, its committed heap, whether it touched it all and the variables of
    :data:`MALLOC`. The test run's own JVM options (``tests/fixtures/jvm_options.py``) are left out: they come first and
    would give every JVM the quick compiler."""
    env = {name: value for name, value in env.items() if name != "JAVA_TOOL_OPTIONS"}
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    done = subprocess.run([str(venv_bin() / "spark-submit"), "--master", "local[1]", str(script), *MALLOC], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=180, check=True)
    line = next(line for line in done.stdout.splitlines() if line.startswith("PROBE "))
    reported: dict[str, object] = json.loads(line.removeprefix("PROBE "))
    return reported


def test_the_stream_environment_names_the_driver_heap_and_java_options_and_keeps_an_operators_own(
        tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path / "home")
    env = stream_env(settings, base={"PATH": "/usr/bin"})
    assert env["SPARK_DRIVER_MEMORY"] == DRIVER_MEMORY
    assert env["SPARK_SUBMIT_OPTS"] == " ".join((*DRIVER_JAVA_OPTIONS, f"-Xms{DRIVER_MEMORY}"))
    assert {name: env[name] for name in MALLOC} == MALLOC
    chosen = load_settings(home=tmp_path / "home", spark_conf={"spark.driver.memory": "3g"})
    env = stream_env(chosen, base={"PATH": "/usr/bin", "MALLOC_ARENA_MAX": "4", "SPARK_SUBMIT_OPTS": "-XX:+UseG1GC"})
    assert env["SPARK_DRIVER_MEMORY"] == "3g"
    assert (env["MALLOC_ARENA_MAX"], env["SPARK_SUBMIT_OPTS"]) == ("4", "-XX:+UseG1GC")
    assert env["MALLOC_MMAP_THRESHOLD_"] == MALLOC["MALLOC_MMAP_THRESHOLD_"]


def test_the_driver_jvm_of_spark_submit_gets_the_settings_heap_whole_and_the_quick_compiler_and_serial_collector(
        tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path / "home", spark_conf={"spark.driver.memory": "700m"})
    reported = _driver(tmp_path, stream_env(settings))
    max_heap = reported["max_heap"]
    assert isinstance(max_heap, int)
    assert 600 * 2**20 <= max_heap <= 700 * 2**20, max_heap  # spark-submit's own default is 1 GiB
    assert reported["collectors"] == ["Copy", "MarkSweepCompact"]  # the serial collector's (G1's by default)
    assert reported["tiered_stop_at_level"] == "1"  # C1 only (4, C2, by default)
    assert reported["committed_heap"] == max_heap  # the whole heap from the start (a quarter of it by default)
    assert reported["always_pre_touch"] == "true"  # and every page of it touched: the RSS is fixed from the start
    assert reported["malloc"] == MALLOC


def test_an_operators_java_options_replace_the_drivers(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path / "home")
    env = stream_env(settings, base={**os.environ, "SPARK_SUBMIT_OPTS": "-XX:+UseParallelGC"})
    reported = _driver(tmp_path, env)
    assert sorted(reported["collectors"]) == ["PS MarkSweep", "PS Scavenge"]  # the parallel collector's
    assert reported["tiered_stop_at_level"] == "4"


def test_the_platforms_processes_get_every_siblings_setting_and_the_stream_its_own_only(tmp_path: Path) -> None:
    given = {"STREAMWARDEN_WARDEN_MAX_RESTARTS": "7", "STREAMWARDEN_MAINTENANCE_SCHEDULE": "@daily",
             "STREAMWARDEN_VALIDATION_EXPECTATIONS": "/x/suite.json", "STREAMWARDEN_SESSION_RESTART_CATCH_UP": "5m"}
    base = {"PATH": "/usr/bin", "AIRFLOW_HOME": "/elsewhere", "STREAMWARDEN_BOOTSTRAP_SERVERS": "old:9092", **given}
    settings = load_settings(home=tmp_path / "home", bootstrap_servers="127.0.0.1:1")

    platform = platform_env(settings, base)
    assert {name: platform[name] for name in given} == given  # what `up` was given reaches Airflow's processes
    assert platform["STREAMWARDEN_BOOTSTRAP_SERVERS"] == "127.0.0.1:1" and "AIRFLOW_HOME" not in platform
    assert not set(given) & set(stream_env(settings, base))  # the stream's own process gets its settings only
