"""The stream host's gate: a session runs ``streamwarden launch`` or ``halt`` and nothing else, with the host's
environment and only who connected added from its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streamwarden.stream_host.gate import allowed_argv, session_env
from streamwarden.stream_host.sshd import session_environment


@pytest.mark.parametrize("asked", [
    None, "", "ls /", "bash -c 'streamwarden launch'", "streamwarden", "streamwarden up",
    "streamwarden stream-host --port 1", "/usr/bin/streamwarden launch", "streamwarden 'launch",
])
def test_refuses_every_command_but_launch_and_halt(asked: str | None) -> None:
    assert allowed_argv(asked) is None


def test_passes_launch_and_halt_with_their_arguments() -> None:
    assert allowed_argv("streamwarden launch --lease-timeout 180 -- --master 'local[2]' --name q") == \
        ["launch", "--lease-timeout", "180", "--", "--master", "local[2]", "--name", "q"]
    assert allowed_argv("streamwarden halt --drain-timeout 120") == ["halt", "--drain-timeout", "120"]


def test_a_session_runs_with_the_hosts_settings_and_keeps_only_who_connected(tmp_path: Path) -> None:
    host = {"STREAMWARDEN_HOME": "/data", "JAVA_HOME": "/jdk",
            "SPARK_LOCAL_DIRS": "/tmp/s", "AIRFLOW_HOME": "/opt/airflow", "PATH": "/usr/bin", "OTHER": "x"}
    env_file = tmp_path / "session-env.json"
    env_file.write_text(json.dumps(session_environment(host)))
    own = {"SSH_CONNECTION": "10.0.0.2 50000 10.0.0.3 22", "PATH": "/bin", "LD_PRELOAD": "/evil.so",
           "USER": "airflow"}
    env = session_env(env_file, own)
    assert env["STREAMWARDEN_HOME"] == "/data" and env["JAVA_HOME"] == "/jdk" and env["SPARK_LOCAL_DIRS"] == "/tmp/s"
    assert env["SSH_CONNECTION"] == own["SSH_CONNECTION"] and env["USER"] == "airflow"
    assert "AIRFLOW_HOME" not in env and "OTHER" not in env and "LD_PRELOAD" not in env
    assert env["PATH"].endswith("/usr/bin") and env["PATH"] != "/usr/bin"  # this environment's scripts first


def test_secrets_the_config_file_holds_stay_out_of_the_session_environment(tmp_path: Path) -> None:
    config = tmp_path / "streamwarden.yaml"
    config.write_text("storage_options: {AWS_SECRET_ACCESS_KEY: s3cr3t}\n")
    host = {"STREAMWARDEN_CONFIG_FILE": str(config), "STREAMWARDEN_STORAGE_OPTIONS": '{"AWS_SECRET_ACCESS_KEY": "x"}',
            "STREAMWARDEN_KAFKA_CONFIG": '{"sasl.password": "p"}'}
    env = session_environment(host)
    assert "STREAMWARDEN_STORAGE_OPTIONS" not in env and env["STREAMWARDEN_CONFIG_FILE"] == str(config)
    assert env["STREAMWARDEN_KAFKA_CONFIG"] == host["STREAMWARDEN_KAFKA_CONFIG"]  # not in the file: passed on
