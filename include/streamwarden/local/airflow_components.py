"""Airflow as separate components for the production rehearsal: api-server, scheduler, dag-processor, triggerer.

Production Airflow 3 runs each component as its own service on one metadata database (PostgreSQL here, with
the LocalExecutor); ``airflow standalone`` (the embedded platform) runs them as children of one process on
SQLite. The components share what a deployment must give each of them alike (:func:`airflow_secrets`): the
JWT secret the API server signs task tokens with and the workers present, the Fernet key of stored
connections, the web secret key. They are made once per home, kept in a file its owner alone reads, and
handed to the components in their environment, never written to a repository file.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import subprocess
from pathlib import Path

from streamwarden.failures import EnvironmentFailure
from streamwarden.warden.launcher import log_tail, venv_bin

COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
"""The components, in the order they start (the API server first: the others report to it)."""
SETTINGS = {"AIRFLOW__CORE__EXECUTOR": "LocalExecutor"}
"""What every component runs with beside the embedded platform's settings (docker-compose.yaml too)."""
SECRET_NAMES = {"jwt_secret": "AIRFLOW__API_AUTH__JWT_SECRET", "fernet_key": "AIRFLOW__CORE__FERNET_KEY",
                "secret_key": "AIRFLOW__API__SECRET_KEY"}


def airflow_secrets(path: Path) -> dict[str, str]:
    """The secrets every component must share, as Airflow's variables: made on first use, kept in ``path``."""
    if not path.is_file():
        made = {"jwt_secret": secrets.token_urlsafe(32),
                "fernet_key": base64.urlsafe_b64encode(os.urandom(32)).decode(),
                "secret_key": secrets.token_urlsafe(32)}
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(json.dumps(made))
    kept: dict[str, str] = json.loads(path.read_text())
    return {variable: kept[name] for name, variable in SECRET_NAMES.items()}


def component_env(base: dict[str, str], database_url: str, api_url: str, secrets_file: Path) -> dict[str, str]:
    """The environment every component runs with: ``base`` (the embedded platform's Airflow settings) on
    PostgreSQL with the LocalExecutor, the execution API reached at ``api_url``, the shared secrets."""
    return {
        **base,
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": database_url,
        **SETTINGS,
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{api_url}/execution/",
        **airflow_secrets(secrets_file),
    }


def component_command(name: str, api_port: int) -> list[str]:
    """The command of one component (the API server on loopback and ``api_port``)."""
    airflow = str(venv_bin() / "airflow")
    if name == "api-server":
        return [airflow, "api-server", "--host", "127.0.0.1", "--port", str(api_port), "--workers", "1"]
    if name not in COMPONENTS:
        raise ValueError(f"unknown Airflow component {name!r}; they are {', '.join(COMPONENTS)}")
    return [airflow, name]


def migrate(env: dict[str, str], cwd: Path, log_path: Path, timeout: float = 600.0) -> None:
    """``airflow db migrate``: the schema of this Airflow version (made, or upgraded, before any component
    starts, as a deployment's init job does); ENVIRONMENT when it fails."""
    with open(log_path, "ab") as log:
        done = subprocess.run([str(venv_bin() / "airflow"), "db", "migrate"], env=env, cwd=cwd,
                              stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, timeout=timeout,
                              check=False)
    if done.returncode != 0:
        raise EnvironmentFailure(f"airflow db migrate failed (exit {done.returncode}); last lines of {log_path}:\n"
                                 f"{log_tail(log_path)}")
