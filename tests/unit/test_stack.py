"""The pinned stack is what it claims to be (NOTES: pyspark-client silently overwrites pyspark)."""

from __future__ import annotations

import re
from pathlib import Path

import pyspark

from fixtures import REPO


def test_pyspark_python_code_matches_the_spark_core_jar() -> None:
    jars = Path(pyspark.__file__).parent / "jars"
    (core,) = [p.name for p in jars.glob("spark-core_*.jar")]
    match = re.match(r"spark-core_[\d.]+-(.+)\.jar$", core)
    assert match, core
    assert pyspark.__version__ == match.group(1), (
        f"pyspark Python code {pyspark.__version__} over spark-core {match.group(1)}: "
        "pin pyspark and pyspark-client to the same version")


def test_python_streaming_source_has_admission_control() -> None:
    from pyspark.sql.datasource import DataSourceStreamReader

    assert "getDefaultReadLimit" in vars(DataSourceStreamReader)


def test_core_library_does_not_import_airflow() -> None:
    sources = REPO / "include" / "streamwarden"
    offenders = [p.name for p in sources.rglob("*.py") if re.search(r"^\s*(from|import) airflow", p.read_text(), re.M)]
    assert offenders == []
