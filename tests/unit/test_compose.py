"""docker-compose.yaml cannot run here (no Docker engine): validate it against the Compose Specification
schema and check, as a reader would, that it is consistent and holds no credentials."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from fixtures import REPO
from streamwarden.local.airflow_components import COMPONENTS
from streamwarden.local.airflow_components import SETTINGS as AIRFLOW_SETTINGS
from streamwarden.local.cluster import EXECUTORS, OUTPUT_ROOT, STREAM_SETTINGS
from streamwarden.local.spark_cluster import ClusterShape
from streamwarden.local.stream_host import CONN_ID, LocalStreamHost
from streamwarden.secrets import is_secret_key

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
    assert {"kafka", "spark-master", "spark-worker-1", "spark-worker-2", "postgres", "s3", "stream-host",
            "airflow-api-server",
            "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer", "airflow-init"} <= set(
        compose["services"])


def test_is_the_topology_the_rehearsal_runs(compose: dict[str, Any]) -> None:
    """One description, two forms: `up --topology cluster` (streamwarden.local.cluster) and this file agree on
    the Airflow components and their commands, the executor, the Spark workers' cores and memory, the executors,
    the stream's settings and where the tables are."""
    services = compose["services"]
    for name in COMPONENTS:
        assert services[f"airflow-{name}"]["command"] == [name], name
    env = compose["x-airflow-env"]
    assert {key: env[key] for key in AIRFLOW_SETTINGS} == AIRFLOW_SETTINGS
    shape = ClusterShape()
    workers = sorted(name for name in services if name.startswith("spark-worker-"))
    assert workers == [f"spark-worker-{n}" for n in range(1, shape.workers + 1)]
    for name in workers:
        command = services[name]["command"]
        cores, memory = command[command.index("--cores") + 1], command[command.index("--memory") + 1]
        assert (int(cores), memory) == (shape.worker_cores, shape.worker_memory), name
    stream = compose["x-streamwarden-env"]
    assert {key: stream[f"STREAMWARDEN_{key.upper()}"] for key in STREAM_SETTINGS} == {
        key: str(value) for key, value in STREAM_SETTINGS.items()}
    assert json.loads(stream["STREAMWARDEN_SPARK_CONF"]).items() >= EXECUTORS.items()
    assert stream["STREAMWARDEN_OUTPUT_ROOT"] == OUTPUT_ROOT
    assert yaml.safe_load((REPO / "streamwarden-config.example.yaml").read_text())["output_root"] == OUTPUT_ROOT


def test_the_warden_reaches_the_stream_host_as_in_the_rehearsal(compose: dict[str, Any], tmp_path: Path) -> None:
    """The stream-host service runs the rehearsal's command (the same options), and the Airflow components reach it
    as the rehearsal's do: the warden's setting names the SSH connection, which names the service, its port, the
    warden's key (a secret only they get) and pins the host key; the driver runs there."""
    services = compose["services"]
    host = services["stream-host"]
    rehearsal = LocalStreamHost(tmp_path, tmp_path / "log", lambda *args: None).command()  # type: ignore[arg-type]
    assert host["entrypoint"] == ["streamwarden", "stream-host"] == [Path(rehearsal[0]).name, rehearsal[1]]
    command = host["command"]
    assert command[::2] == [*rehearsal[2::2], "--login"]
    option = dict(zip(command[::2], command[1::2], strict=True))
    env = compose["x-airflow-env"]
    assert env["STREAMWARDEN_WARDEN_STREAM_HOST_CONN_ID"] == CONN_ID
    connection = json.loads(env[f"AIRFLOW_CONN_{CONN_ID.upper()}"])
    assert (connection["conn_type"], connection["host"], str(connection["port"]), connection["login"]) == (
        "ssh", host["hostname"], option["--port"], option["--login"])
    assert connection["extra"]["host_key"] == "${STREAM_HOST_PUBLIC_KEY}"
    secrets = compose["secrets"]
    assert connection["extra"]["key_file"] == "/run/secrets/warden-key"
    assert option["--authorized-keys"] == "/run/secrets/warden-key-pub" and option["--host-key"] == \
        "/run/secrets/stream-host-key"
    assert secrets["warden-key-pub"]["file"] == f"{secrets['warden-key']['file']}.pub"
    for name, service in services.items():
        assert ("warden-key" in service.get("secrets", [])) == (name.startswith("airflow-")), name
    assert "streamwarden-config" in host["secrets"] and host["environment"]["STREAMWARDEN_CONFIG_FILE"]
    assert json.loads(compose["x-streamwarden-env"]["STREAMWARDEN_SPARK_CONF"])["spark.driver.host"] == \
        host["hostname"]


def test_the_stream_secrets_reach_only_what_reads_settings(compose: dict[str, Any]) -> None:
    services = compose["services"]
    stream = compose["x-streamwarden-env"]
    assert stream["STREAMWARDEN_CONFIG_FILE"] == "/run/secrets/streamwarden-config"
    for name, service in services.items():
        environment = service.get("environment", {})
        if isinstance(environment, dict) and "STREAMWARDEN_CONFIG_FILE" in environment:
            assert "streamwarden-config" in service.get("secrets", []), name
    for name in ("spark-worker-1", "spark-worker-2", "spark-master", "s3"):
        assert "secrets" not in services[name], name
    example = yaml.safe_load((REPO / "streamwarden-config.example.yaml").read_text())["storage_options"]
    assert {example[k] for k in example if is_secret_key(k)} == {"change-me"}


def test_dependencies_exist(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name, service in services.items():
        assert set(service.get("depends_on", {})) <= set(services), name


def test_no_credentials_in_the_compose_file() -> None:
    text = (REPO / "docker-compose.yaml").read_text()
    assert not re.search(r"(?i)(password|secret|fernet|jwt)[\w.]*[ \t]*[:=][ \t]*['\"]?[^\s$'\"]", text)
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
