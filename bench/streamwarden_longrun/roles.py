"""The process roles of `streamwarden up`'s platform, told apart by command line.

Airflow renames its processes (``setproctitle``: ``airflow worker -- LocalExecutor: <idle>``, ``airflow
api_server -- host:...``), and a forked process keeps its parent's command line (a DAG file's parse keeps the
dag-processor's, a PySpark worker its daemon's), so a role is the command line a process shows *now*, read at
every look. The order of :data:`ROLES` matters: the first pattern that matches wins.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Role:
    name: str
    pattern: re.Pattern[str]
    expected: bool  # every run must show it at least once (the transient launch processes need not)
    what: str


def _role(name: str, pattern: str, what: str, expected: bool = True) -> Role:
    return Role(name, re.compile(pattern), expected, what)


ROLES: tuple[Role, ...] = (
    _role("up", r"streamwarden up\b", "`streamwarden up` itself (the child subreaper)"),
    _role("broker", r"/tansu broker\b|^tansu\b", "Tansu, the Kafka-protocol broker (memory storage)"),
    _role("producer", r"streamwarden produce\b", "the demo producer"),
    _role("airflow-standalone", r"airflow standalone\b", "`airflow standalone`, which runs the components below"),
    _role("airflow-scheduler", r"airflow scheduler\b", "the scheduler"),
    _role("airflow-api-server", r"airflow api[-_]server\b", "the API server (UI, REST, execution API)"),
    _role("airflow-dag-processor", r"airflow dag-processor\b", "the DAG processor and its parse processes"),
    _role("airflow-triggerer", r"airflow triggerer\b", "the triggerer (the warden's watch) and its runner"),
    _role("airflow-serve-logs", r"airflow serve-logs\b",
          "the log servers of the scheduler and the triggerer (not always seen: they may start after the samples)",
          expected=False),
    _role("airflow-executor", r"airflow worker -- LocalExecutor", "LocalExecutor's worker processes"),
    _role("airflow-tasks", r"airflow worker -- |airflow task|task runner|task supervisor",
          "a task's supervisor and runner (while a task runs)"),
    _role("stream-driver-jvm", r"java .*org\.apache\.spark\.deploy\.SparkSubmit",
          "the stream's driver JVM (spark-submit; on local[*] it does the work)"),
    _role("helpers", r"bin/spark-class|bin/spark-submit|find_spark_home\.py|/jspawnhelper\b|^chmod \d+ |^rm -rf |"
          r"-c import sys; print\(",
          "short-lived helper commands: spark-submit's shell wrappers and Python version probe, the JVM's "
          "jspawnhelper, the `chmod` Hadoop's local file system runs for each checkpoint file it writes, Spark's "
          "`rm -rf` of its local folders at exit", expected=False),
    _role("stream-driver-python", r"jobs/stream\.py\b", "the stream's Python driver (jobs/stream.py)"),
    _role("stream-python-workers",
          r"-m pyspark\.|-m streamwarden\.stream\.worker_daemon\b|pyspark/daemon\.py|pyspark/worker\.py",
          "PySpark's worker daemons (the stream's preloading one too) and workers, the source runner, the state "
          "driver worker"),
)
OTHER = "other"
ROLE_NAMES: tuple[str, ...] = (*(role.name for role in ROLES), OTHER)
EXPECTED_ROLES: tuple[str, ...] = tuple(role.name for role in ROLES if role.expected)


def classify(command_line: str) -> str:
    """The role of a process with this command line (arguments joined by spaces), or :data:`OTHER`."""
    for role in ROLES:
        if role.pattern.search(command_line):
            return role.name
    return OTHER
