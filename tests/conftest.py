"""Shared real fixtures: a Kafka-protocol broker, a local Spark session, a migrated Airflow home.

Airflow reads its configuration at import time, so the Airflow environment is set here, before any
test module can import it.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

REPO = Path(__file__).resolve().parents[1]
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

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from streamwarden.local.broker import LocalBroker


@pytest.hookimpl(optionalhook=True)  # an xdist hook: unknown without it (-p no:xdist)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``make test``'s two workers: every file holding a drill (a ``slow`` test: real job processes, an Airflow
    server, a browser) in one unit, so the drills run one after another on one worker, never two at once on two
    cores; every other file a unit of its own (its module fixtures made once), on whichever worker is free.
    (xdist's ``loadgroup`` would say this with markers, but it renames node ids in a way pytest 9 ignores.)"""
    from xdist.scheduler import LoadScopeScheduling

    # and the files answering approvals in process: under per-test distribution two of them hung (the answering
    # thread never saw its request); in this unit they run in the order a single process runs them
    drills = {str(path.relative_to(REPO)) for path in (REPO / "tests").rglob("test_*.py")
              if "pytest.mark.slow" in (text := path.read_text()) or "answer_in_process" in text}

    class DrillsTogether(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "drills" if path in drills else path

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
    from s3_server import loopback_s3

    with loopback_s3() as url:
        yield url
