"""Classification survives the trip through Spark: an error raised in a worker comes back classified."""

from __future__ import annotations

import re

import pytest
from pyspark.sql import SparkSession

from fixtures import REPO
from streamwarden.failures import (
    EXIT_ALREADY_RUNNING,
    EXIT_CODES,
    DataLossError,
    FailureClass,
    FailureDocument,
    IntegrityError,
    MalformedDataError,
    classify,
)
from streamwarden.runfiles.failure_file import read_failure, write_failure


def test_exit_codes_are_distinct_and_documented() -> None:
    codes = [*EXIT_CODES.values(), EXIT_ALREADY_RUNNING, 0]
    assert len(set(codes)) == len(codes)
    assert set(EXIT_CODES) == set(FailureClass)

    readme = (REPO / "README.md").read_text()
    table = readme[readme.index("## Exit codes"):]
    documented = {int(code): cls for code, cls in re.findall(r"^\| (\d+) \| *`?([A-Z_]*)`? *\|", table, re.M)}
    assert documented == {0: "", EXIT_ALREADY_RUNNING: "", **{code: cls.value for cls, code in EXIT_CODES.items()}}


def _raise_in_worker(spark: SparkSession, error: Exception) -> BaseException:
    def boom(value: int) -> int:
        raise error

    with pytest.raises(Exception) as caught:
        spark.sparkContext.parallelize([1], 1).map(boom).collect()
    return caught.value


@pytest.mark.parametrize(("error", "expected"), [
    (MalformedDataError("value is not JSON", topic="t", partition=3, offset=42), FailureClass.MALFORMED),
    (DataLossError("offset 5 expired", topic="t", partition=0, offset=5), FailureClass.DATA_LOSS),
    (IntegrityError("seq gap", topic="t", partition=1, offset=9, details={"expected": 4, "seen": 6}),
     FailureClass.INTEGRITY),
    (ZeroDivisionError("division by zero"), FailureClass.BUG),
])
def test_worker_errors_are_classified_on_the_driver(
    spark: SparkSession, error: Exception, expected: FailureClass
) -> None:
    document = classify(_raise_in_worker(spark, error))
    assert document.failure_class is expected
    assert document.exit_code == EXIT_CODES[expected]
    if expected is not FailureClass.BUG:
        assert (document.topic, document.partition, document.offset) == (error.topic, error.partition,  # type: ignore[attr-defined]
                                                                         error.offset)  # type: ignore[attr-defined]
        assert document.details == error.details  # type: ignore[attr-defined]


def test_environment_hint_and_failure_document_round_trip(tmp_path: object) -> None:
    document = classify(RuntimeError("KafkaError{code=_TRANSPORT,val=-195,str=\"Connection refused\"}"))
    assert document.failure_class is FailureClass.ENVIRONMENT
    path = __import__("pathlib").Path(str(tmp_path)) / "last_failure.json"
    write_failure(path, document)
    assert read_failure(path) == document
    assert isinstance(read_failure(path), FailureDocument)


def test_a_python_worker_killed_in_a_batch_is_environment_naming_the_death(spark: SparkSession) -> None:
    import os
    import signal

    def die(value: int) -> int:
        os.kill(os.getpid(), signal.SIGSEGV)
        return value

    with pytest.raises(Exception) as caught:
        spark.sparkContext.parallelize([1], 1).map(die).collect()
    document = classify(caught.value)
    assert document.failure_class is FailureClass.ENVIRONMENT, document.message
    assert document.message.startswith("a Python worker died during a batch")


def test_the_sources_process_dying_while_planning_is_environment_naming_the_source(spark: SparkSession) -> None:
    """The Kafka source plans batches in a Python process of its own; a native crash there (the Kafka client's
    on a topic deleted mid-fetch) reaches the driver as an EOFException in the query's JVM trace."""
    import os
    import signal
    from typing import Any

    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.types import StructType

    class CrashingReader(DataSourceStreamReader):
        def initialOffset(self) -> dict[str, Any]:
            return {"at": 0}

        def latestOffset(self) -> dict[str, Any]:
            os.kill(os.getpid(), signal.SIGSEGV)
            return {"at": 1}

        def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
            return []

        def read(self, partition: InputPartition) -> Any:
            return iter(())

    class Crashing(DataSource):
        @classmethod
        def name(cls) -> str:
            return "crashing_source"

        def schema(self) -> str:
            return "value INT"

        def streamReader(self, schema: StructType) -> DataSourceStreamReader:
            return CrashingReader()

    spark.dataSource.register(Crashing)
    query = spark.readStream.format("crashing_source").load().writeStream.format("noop").start()
    try:
        with pytest.raises(Exception) as caught:
            query.awaitTermination(120)
    finally:
        query.stop()
    document = classify(caught.value)
    assert document.failure_class is FailureClass.ENVIRONMENT, document.message
    assert document.message.startswith("the Kafka source's Python process died while planning a batch")
