"""Secrets never leave: a marker secret fed through every path is absent from every output and file.

The marker is configured the way an operator would (``sasl.password`` in ``STREAMWARDEN_KAFKA_CONFIG`` or
in the config file, a password in the webhook URL) and then pushed through the paths that carry text out
of the process: stderr of the CLI, ``status``, ``last_failure.json``, ``alerts.jsonl``, the webhook body,
and the task logs of a real ``dag.test()`` run of the supervisor.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from fixtures import REPO
from streamwarden.failures import FailureClass
from streamwarden.secrets import MASK, is_secret_key, redact, scrub

MARKER = "MARKER-5ecret-7f3a"


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("STREAMWARDEN_")}
    full.update(env)
    return subprocess.run([sys.executable, "-m", "streamwarden", *args], env=full, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)


def _files_under(root: Path) -> dict[str, str]:
    return {str(p): p.read_text(errors="replace") for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("key", ["sasl.password", "sasl.oauthbearer.client.secret", "ssl.key.password",
                                 "ssl.keystore.key", "spark.hadoop.fs.s3a.secret.key", "api_token", "Password",
                                 "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "azure_storage_account_key",
                                 "AZURE_STORAGE_SAS_KEY", "access_key", "GOOGLE_SERVICE_ACCOUNT_KEY"])
def test_secret_keys_are_recognised(key: str) -> None:
    assert is_secret_key(key)
    assert redact({key: MARKER, "bootstrap.servers": "b:9092"}) == {key: MASK, "bootstrap.servers": "b:9092"}


@pytest.mark.parametrize("text", [
    f'{{"sasl.password": "{MARKER}"}}',
    f"input_value={{'sasl.password': '{MARKER}'}}",
    f"sasl.password={MARKER}; retrying",
    f"posting to https://alerts:{MARKER}@hooks.example/path failed",
    f"api_token: {MARKER}",
    f'storage options {{"azure_storage_account_key": "{MARKER}", "AWS_REGION": "eu-west-1"}}',
])
def test_secret_values_are_scrubbed_from_free_text(text: str) -> None:
    assert MARKER not in scrub(text) and MASK in scrub(text)


@pytest.mark.parametrize("where", ["environment-json-typo", "environment-number", "config-file-string"])
def test_a_bad_setting_never_echoes_the_secret(where: str, tmp_path: Path) -> None:
    env = {"STREAMWARDEN_HOME": str(tmp_path / "home")}
    if where == "environment-json-typo":
        env["STREAMWARDEN_KAFKA_CONFIG"] = f'{{"sasl.password": "{MARKER}", oops}}'
    elif where == "environment-number":  # valid map, but a nested value makes the setting fail
        env["STREAMWARDEN_KAFKA_CONFIG"] = '{"sasl.password": 987654321, "x": {"y": 1}}'
    else:
        config = tmp_path / "streamwarden.yaml"
        config.write_text(f"kafka_config: '{{\"sasl.password\":\"{MARKER}\", oops}}'\n")  # not even JSON
        env["STREAMWARDEN_CONFIG_FILE"] = str(config)
    secret = "987654321" if where == "environment-number" else MARKER

    stream = _cli(["stream"], env)
    status = _cli(["status"], env)

    assert stream.returncode == status.returncode == 78, stream.stderr + status.stderr
    assert "STREAMWARDEN_KAFKA_CONFIG" in stream.stderr
    for output in (stream.stdout, stream.stderr, status.stdout, status.stderr):
        assert secret not in output
    files = _files_under(tmp_path / "home")
    assert str(tmp_path / "home" / "run" / "last_failure.json") in files
    assert [path for path, text in files.items() if secret in text] == []


class _Webhook(BaseHTTPRequestHandler):
    bodies: list[bytes] = []

    def do_POST(self) -> None:
        self.bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def webhook() -> Iterator[tuple[str, list[bytes]]]:
    server = HTTPServer(("127.0.0.1", 0), _Webhook)
    _Webhook.bodies = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://hook:{MARKER}@127.0.0.1:{server.server_address[1]}/alerts", _Webhook.bodies
    server.shutdown()
    server.server_close()


@pytest.mark.usefixtures("airflow_db")
def test_a_failure_carrying_the_secret_reaches_no_status_alert_webhook_or_task_log(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, webhook: tuple[str, list[bytes]],
        caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]) -> None:
    url, bodies = webhook
    home = tmp_path / "home"
    monkeypatch.setenv("STREAMWARDEN_HOME", str(home))
    monkeypatch.setenv("STREAMWARDEN_BOOTSTRAP_SERVERS", "127.0.0.1:9")  # no broker: lag unknown, not fatal
    monkeypatch.setenv("STREAMWARDEN_KAFKA_CONFIG", json.dumps({"sasl.password": MARKER}))
    monkeypatch.setenv("STREAMWARDEN_WARDEN_BROKER_TIMEOUT", "1s")
    monkeypatch.setenv("STREAMWARDEN_WARDEN_WEBHOOK_URL", url)
    # The stream died of a CONFIG failure whose text echoed the password: written raw, as a library
    # message (or an older release) could have, bypassing the masking of write_failure.
    failure = home / "run" / "last_failure.json"
    failure.parent.mkdir(parents=True)
    failure.write_text(json.dumps({
        "failure_class": FailureClass.CONFIG.value, "exit_code": 78, "pid": 1,
        "occurred_at": "2026-11-23T00:00:00+00:00",
        "message": f"SASL authentication failed for sasl.password={MARKER}", "topic": None, "partition": None,
        "offset": None, "details": {"kafka": {"sasl.password": MARKER}}, "traceback": f"Error: {MARKER}"}))
    caplog.set_level(logging.DEBUG)
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=str(REPO / "dags")).dags["stream_supervisor"]
    run = dag.test()
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    status = _cli(["status"], {"STREAMWARDEN_HOME": str(home), "STREAMWARDEN_KAFKA_CONFIG": json.dumps(
        {"sasl.password": MARKER})})

    assert states["escalate"] == "failed" and states["restart_stream"] == "skipped"
    alerts = [json.loads(line) for line in (home / "run" / "alerts.jsonl").read_text().splitlines()]
    assert alerts and alerts[-1]["failure_class"] == "CONFIG" and alerts[-1]["deliveries"]["webhook"] == "sent"
    assert len(bodies) == len(alerts) and json.loads(bodies[-1])["failure_class"] == "CONFIG"
    task_logs = caplog.text + "".join(capfd.readouterr())
    assert "SASL authentication failed" in task_logs  # the failure was logged, masked
    assert status.returncode == 0 and "SASL authentication failed" in status.stdout
    leaks = {"task logs": task_logs, "status": status.stdout + status.stderr,
             "webhook": b"".join(bodies).decode(), **_files_under(home / "run")}
    del leaks[str(failure)]  # the raw input of this test
    assert [where for where, text in leaks.items() if MARKER in text] == []
    assert (home / "run" / "alerts.jsonl").stat().st_mode & 0o077 == 0


def test_a_secret_the_config_file_holds_stays_in_the_file_for_the_stream_and_the_platform(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rehearsal's secrets file: the stream and Airflow get the file's path, never its secret values in their
    environment (where every process of the user could read them), and read them back from the file."""
    from streamwarden.settings import load_settings
    from streamwarden.warden.launcher import platform_env, stream_env

    secret = "s3-secret-value-93f1"
    config = tmp_path / "streamwarden.yaml"
    config.write_text(f"output_root: s3://lake/tables\nstorage_options:\n  AWS_SECRET_ACCESS_KEY: {secret}\n"
                      "  AWS_ACCESS_KEY_ID: key-id\n")
    monkeypatch.setenv("STREAMWARDEN_CONFIG_FILE", str(config))
    monkeypatch.setenv("STREAMWARDEN_HOME", str(tmp_path / "home"))
    settings = load_settings()
    assert settings.storage_options["AWS_SECRET_ACCESS_KEY"] == secret
    for env in (stream_env(settings), platform_env(settings)):
        assert env["STREAMWARDEN_CONFIG_FILE"] == str(config)
        assert "STREAMWARDEN_STORAGE_OPTIONS" not in env
        assert not any(secret in value for value in env.values())
        assert env["STREAMWARDEN_OUTPUT_ROOT"] == "s3://lake/tables"  # not secret: in the environment as before
    child = subprocess.run([sys.executable, "-c", "from streamwarden.settings import load_settings; "
                            "print(load_settings().storage_options['AWS_ACCESS_KEY_ID'])"],
                           env=stream_env(settings), capture_output=True, text=True, check=True)
    assert child.stdout.strip() == "key-id"
