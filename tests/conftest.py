"""Shared real fixtures: a Kafka-protocol broker, a local Spark session, a migrated Airflow home.

Airflow reads its configuration at import time, so the Airflow environment is set here, before any
test module can import it.
"""

from __future__ import annotations

import logging
import os
import resource
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from fixtures import REPO

_AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="sw-airflow-"))
os.environ.update({
    "AIRFLOW_HOME": str(_AIRFLOW_HOME),
    "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
    "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_AIRFLOW_HOME}/airflow.db",
    "PYSPARK_PYTHON": sys.executable,
    "PYSPARK_DRIVER_PYTHON": sys.executable,
})
logging.getLogger("py4j").setLevel(logging.WARNING)  # its exit-time INFO lines outlive pytest's capture
for _name in [n for n in os.environ if n.startswith("STREAMWARDEN_")]:
    del os.environ[_name]  # tests build their own settings; a developer's shell must not leak in

pytest_plugins = ("fixtures.stand_in", "fixtures.webhook")
"""Fixture modules whose fixtures any test may request by name."""
_CPU_AT_SETUP = pytest.StashKey[float]()

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from streamwarden.local.broker import LocalBroker


AIRFLOW_SIDE = ("dags", "ui", "local", "warden")
"""Drill areas of the second drill unit: an Airflow server, ``dag.test()`` with approvals, ``up``, the long run (the
first: the stream's job processes, maintenance and recovery beside it)."""
SOAK = "tests/drills/soak/"
"""The short soak: the longest single file (a whole platform for eight minutes), first on the third worker."""
REHEARSAL = "tests/drills/rehearsal/"
"""The production rehearsal under faults: a whole cluster topology for about a quarter of an hour."""
BESIDE_EITHER = (SOAK, REHEARSAL, "tests/drills/logs/", "tests/drills/test_bench_floor.py",
                 "tests/drills/test_bench_smoke.py",
                 "tests/drills/stream/test_stream_failures.py", "tests/drills/dags/test_recover_stream_dag.py",
                 "tests/drills/upgrade/test_upgrade_drills.py")
"""Drill files that judge outcomes, not timings (a failure class, a log bound, the bench's own floors, a recovery
and an upgrade through ``dag.test()``, the soak's verdict): each a unit of its own, run on the third worker beside
whichever drills the other two run, so that the two drill units, the run's longest path, end about when the third
worker does."""


def _drill_units() -> dict[str, str]:
    """Each drill file (``tests/drills/``: real job processes, an Airflow server, a browser; and the files answering
    approvals in process) and its unit: ``drills-stream`` or ``drills-airflow``."""
    units = {}
    for path in (REPO / "tests").rglob("test_*.py"):
        relative = str(path.relative_to(REPO))
        tier, area, *_ = path.relative_to(REPO / "tests").parts
        if relative.startswith(BESIDE_EITHER):
            continue
        if tier == "drills" or "answer_in_process" in path.read_text():
            units[relative] = "drills-airflow" if area in AIRFLOW_SIDE else "drills-stream"
    return units


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The drill units first, so that two of the workers each start one (the longest work), then the soak, which the
    third takes before the other files, then the rehearsal, for the first worker free; the others join in as their
    units end."""
    units = _drill_units()
    rank = {"drills-stream": 0, "drills-airflow": 1, SOAK: 2, REHEARSAL: 3}

    def order(item: pytest.Item) -> int:
        path = item.nodeid.split("::", 1)[0]
        alone = next((prefix for prefix in (SOAK, REHEARSAL) if path.startswith(prefix)), None)
        return rank.get(alone or units.get(path, ""), 4)

    items.sort(key=order)


def pytest_configure(config: pytest.Config) -> None:
    """The JVMs' options (``tests/fixtures/jvm_options.py``), made once by the controlling process: the workers and
    every process they start inherit them. A ``JAVA_TOOL_OPTIONS`` already set is left as it is."""
    if not hasattr(config, "workerinput") and "JAVA_TOOL_OPTIONS" not in os.environ:
        from fixtures.jvm_options import jvm_options

        os.environ["JAVA_TOOL_OPTIONS"] = jvm_options()


def _cpu_seconds() -> float:
    """CPU time of this process and of the children it has reaped (a job process, its JVM and Python workers,
    once waited for)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_CPU_AT_SETUP] = _cpu_seconds()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Each test's CPU seconds, set-up to teardown, as a ``cpu_s`` property in the JUnit XML: on 2 cores the
    suite's wall time follows its CPU. Only what this process reaps is counted: a job process killed with its
    group leaves its JVM and Python workers to init, so a drill's figure is a lower bound. Beside it the worker
    that ran the test and when it ended (``ended_at``, Unix seconds): the workers' timelines, to see where
    one waited for the other."""
    if call.when == "teardown" and _CPU_AT_SETUP in item.stash:
        item.user_properties.append(("cpu_s", round(_cpu_seconds() - item.stash[_CPU_AT_SETUP], 1)))
        item.user_properties.append(("worker", os.environ.get("PYTEST_XDIST_WORKER", "main")))
        item.user_properties.append(("ended_at", round(time.time(), 1)))
    yield


@pytest.hookimpl(optionalhook=True)  # an xdist hook: unknown without it (-p no:xdist)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``make test``'s three workers: the drill files in two units, each run whole on one worker, one after
    another, so never two drills of one kind at once; every other file a unit of its own (its module
    fixtures made once), on whichever worker is free. Units are handed out in collection order (the drill units
    first), not xdist's largest-first. The files answering approvals in process stay in a
    unit (under per-test distribution the answering thread once gave up before its request appeared).
    (xdist's ``loadgroup`` would say this with markers, but it renames node ids in a way pytest 9 ignores.)"""
    from xdist.scheduler import LoadScopeScheduling

    units = _drill_units()
    config.option.loadscopereorder = False

    class DrillsTogether(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return units.get(path, path)

    return DrillsTogether(config, log)


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    """A real Kafka-protocol broker (Tansu, memory storage) on a free loopback port."""
    from streamwarden.local.broker import LocalBroker

    log = tmp_path_factory.mktemp("broker") / "tansu.log"
    with LocalBroker(log_path=log) as running:
        yield running


@pytest.fixture()
def topic_factory(broker: LocalBroker) -> Callable[..., list[str]]:
    """Create uniquely named topics for one test: ``topic_factory(count, partitions=4, prefix=None)``."""
    from streamwarden.kafka.admin import create_topics

    def create(count: int = 1, partitions: int = 4, prefix: str | None = None) -> list[str]:
        base = prefix or f"t{uuid.uuid4().hex[:8]}"
        names = [f"{base}-s{i}" for i in range(count)]
        create_topics({"bootstrap.servers": broker.bootstrap_servers}, names, partitions)
        return names

    return create


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """A local[2] Spark session: small shuffle, no UI, workers on this venv's Python. One JVM serves the whole
    run's Spark tests, so it keeps the heap it had before the stream's own was made smaller (2 GiB)."""
    from streamwarden.settings import load_settings
    from streamwarden.stream.spark_session import build_spark_session

    session = build_spark_session(load_settings(spark_master="local[2]", shuffle_partitions=2,
                                                spark_conf={"spark.driver.memory": "2g"}),
                                  app_name="streamwarden-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """A migrated SQLite Airflow metadata DB under a temp ``AIRFLOW_HOME`` (for ``dag.test()``)."""
    from airflow.utils import db

    db.initdb()
    return _AIRFLOW_HOME


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """A loopback S3 server (moto, its own process) with an empty bucket: its URL."""
    from fixtures.s3_server import loopback_s3

    with loopback_s3() as url:
        yield url
