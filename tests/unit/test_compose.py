"""docker-compose.yaml cannot run here (no Docker engine): validate it against the Compose Specification
schema and check, as a reader would, that it is consistent and holds no credentials."""

from __future__ import annotations

import json
import os
import re
from typing import Any

import jsonschema
import pytest
import yaml

from fixtures import REPO

SCHEMA = REPO.parent / "shared" / "compose-spec.json"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((REPO / "docker-compose.yaml").read_text())
    return document


def _env_example() -> dict[str, str]:
    lines = (REPO / ".env.example").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line.strip() and not line.startswith("#"))


@pytest.mark.skipif(not SCHEMA.exists() and not os.environ.get("CI"),
                    reason="the Compose schema lives in ../shared (beside every CI clone: there it must exist)")
def test_matches_the_compose_specification(compose: dict[str, Any]) -> None:
    assert SCHEMA.is_file(), f"{SCHEMA} is missing: CI clones have ../shared beside them"
    jsonschema.Draft7Validator(json.loads(SCHEMA.read_text())).validate(compose)


def test_has_the_production_components(compose: dict[str, Any]) -> None:
    assert {"kafka", "spark-master", "spark-worker", "postgres", "airflow-api-server", "airflow-scheduler",
            "airflow-dag-processor", "airflow-triggerer", "airflow-init"} <= set(compose["services"])


def test_dependencies_exist(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name, service in services.items():
        assert set(service.get("depends_on", {})) <= set(services), name


def test_no_credentials_in_the_compose_file() -> None:
    text = (REPO / "docker-compose.yaml").read_text()
    assert not re.search(r"(?i)(password|secret|fernet|jwt)[\w.]*\s*[:=]\s*['\"]?[^\s$'\"]", text)
    assert not re.search(r"\w+://[^/\s:@]+:[^@\s]+@", text), "URLs with a password belong in .env"


def test_env_example_holds_only_placeholders_and_everything_interpolated() -> None:
    env = _env_example()
    secrets = {k: v for k, v in env.items() if re.search(r"(?i)password|secret|fernet|jwt", k)}
    assert secrets and all(v == "change-me" for v in secrets.values()), secrets
    assert "change-me@" in env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    used = set(re.findall(r"\$\{(\w+)", (REPO / "docker-compose.yaml").read_text()))
    assert used <= set(env), used - set(env)


def test_build_context_has_what_the_image_copies(compose: dict[str, Any]) -> None:
    dockerfile = compose["x-streamwarden-image"]["build"]["dockerfile_inline"]
    for line in dockerfile.splitlines():
        if line.strip().startswith("COPY"):
            for source in line.split()[2:-1]:
                assert (REPO / source).exists(), source


def test_spark_connection_matches_the_stream_master(compose: dict[str, Any]) -> None:
    env = compose["x-airflow-env"]
    connection = json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"])
    assert connection["host"] == env["STREAMWARDEN_SPARK_MASTER"]
    assert json.loads(env["STREAMWARDEN_SPARK_CONF"])["spark.driver.host"] == \
        compose["services"]["airflow-scheduler"]["hostname"]


def test_every_airflow_component_gets_the_settings_of_every_sibling_from_the_env_file(compose: dict[str, Any]) -> None:
    # the sibling DAGs read their settings in Airflow's processes: each component takes .env whole, beside the
    # stream's shared settings, so a STREAMWARDEN_* line there reaches maintenance, validation, the warden and the
    # session restarts alike (not only the stream's own)
    airflow = {name: service for name, service in compose["services"].items()
               if name.startswith("airflow-") and name != "airflow-init"}
    assert {"airflow-api-server", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"} <= set(airflow)
    for name, service in airflow.items():
        env_files = service.get("env_file")
        assert ".env" in ([env_files] if isinstance(env_files, str) else env_files or []), name
        assert service["environment"]["STREAMWARDEN_HOME"] == "/data", name
    shown = re.findall(r"^# (STREAMWARDEN_[A-Z_]+)=", (REPO / ".env.example").read_text(), re.MULTILINE)
    siblings = ("MAINTENANCE", "VALIDATION", "WARDEN", "SESSION_RESTART")
    assert all(any(name.startswith(f"STREAMWARDEN_{s}_") for name in shown) for s in siblings), shown
