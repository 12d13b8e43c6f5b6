"""Bad settings and arguments, as a careful operator would try them: each ends at once with its documented
exit code, without a traceback and without starting Spark, and says what was wrong and where.

Exit codes: 78 (CONFIG) for settings, 2 for command-line usage, 75 (ENVIRONMENT) for a missing broker or a
taken port. ``stream`` also leaves a CONFIG failure document for the warden (so it escalates instead of
restarting a typo until the circuit breaker trips).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from streamwarden.local.broker import free_port


@dataclass(frozen=True)
class Case:
    id: str
    args: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    exit_code: int = 78
    says: str = ""
    files: dict[str, str] = field(default_factory=dict)  # {relative path: content}, "{tmp}" in env expands
    failure_document: bool = False  # `stream` must leave one saying the same


def _stream(case_id: str, env: dict[str, str], says: str, **kw: object) -> Case:
    return Case(case_id, ("stream",), env, says=says, failure_document=True, **kw)  # type: ignore[arg-type]


def _status(case_id: str, env: dict[str, str], says: str, **kw: object) -> Case:
    return Case(case_id, ("status",), env, says=says, **kw)  # type: ignore[arg-type]


CASES = [
    _stream("kafka-config-not-json", {"STREAMWARDEN_KAFKA_CONFIG": "{not json"},
            "STREAMWARDEN_KAFKA_CONFIG: not valid JSON"),
    _stream("spark-conf-not-json", {"STREAMWARDEN_SPARK_CONF": "{not json"}, "STREAMWARDEN_SPARK_CONF: not valid JSON"),
    _stream("table-schema-not-json", {"STREAMWARDEN_TABLE_SCHEMA": "{not json"}, "table schema is not valid JSON"),
    _stream("config-file-malformed", {"STREAMWARDEN_CONFIG_FILE": "{tmp}/bad.yaml"}, "not valid YAML at line 2",
            files={"bad.yaml": "a: 1\n  b: [\n"}),
    _stream("config-file-a-list", {"STREAMWARDEN_CONFIG_FILE": "{tmp}/list.yaml"}, "must be a mapping",
            files={"list.yaml": "- a\n- b\n"}),
    Case("run-root-is-a-file", ("stream",), {"STREAMWARDEN_RUN_ROOT": "{tmp}/afile"},
         says="STREAMWARDEN_RUN_ROOT='{tmp}/afile': exists and is not a folder", files={"afile": "x"}),
    _stream("checkpoint-root-is-a-file", {"STREAMWARDEN_CHECKPOINT_ROOT": "{tmp}/afile"},
            "STREAMWARDEN_CHECKPOINT_ROOT='{tmp}/afile': exists and is not a folder", files={"afile": "x"}),
    _status("config-file-missing", {"STREAMWARDEN_CONFIG_FILE": "/does/not/exist.yaml"},
            "cannot read the config file (No such file or directory)"),
    _status("misspelt-variable", {"STREAMWARDEN_TRIGER_INTERVAL": "5s"},
            "unknown environment variable STREAMWARDEN_TRIGER_INTERVAL; did you mean STREAMWARDEN_TRIGGER_INTERVAL?"),
    _status("expectations-under-the-issue-name", {"STREAMWARDEN_EXPECTATIONS": "{tmp}/mine.json"},
            "unknown environment variable STREAMWARDEN_EXPECTATIONS; the setting is "
            "STREAMWARDEN_VALIDATION_EXPECTATIONS"),
    _status("misspelt-warden-variable", {"STREAMWARDEN_WARDEN_BACKOF_MAX": "60s"},
            "did you mean STREAMWARDEN_WARDEN_BACKOFF_MAX?"),
    _status("misspelt-config-key", {"STREAMWARDEN_CONFIG_FILE": "{tmp}/c.yaml"},
            "unknown key in STREAMWARDEN_CONFIG_FILE trigger_intervall; did you mean trigger_interval?",
            files={"c.yaml": "trigger_intervall: 5s\n"}),
    _stream("output-root-empty", {"STREAMWARDEN_OUTPUT_ROOT": ""}, "STREAMWARDEN_OUTPUT_ROOT='': must not be empty"),
    _stream("output-root-is-a-file", {"STREAMWARDEN_OUTPUT_ROOT": "{tmp}/afile"}, "exists and is not a folder",
            files={"afile": "x"}),
    _status("output-root-under-a-file", {"STREAMWARDEN_OUTPUT_ROOT": "{tmp}/afile/out"},
            "cannot be created: {tmp}/afile is not a folder", files={"afile": "x"}),
    _stream("output-root-unknown-scheme", {"STREAMWARDEN_OUTPUT_ROOT": "hdfs://namenode/out"},
            "STREAMWARDEN_OUTPUT_ROOT='hdfs://namenode/out': unknown scheme 'hdfs'"),
    _status("output-root-without-a-bucket", {"STREAMWARDEN_OUTPUT_ROOT": "s3:///out"}, "s3:// needs a bucket"),
    _stream("output-root-az-without-an-account", {"STREAMWARDEN_OUTPUT_ROOT": "az://data/out",
                                                  "STREAMWARDEN_STORAGE_OPTIONS": '{"azure_storage_account_key": "k"}'},
            "az:// needs the account"),
    _status("home-is-the-filesystem-root", {"STREAMWARDEN_HOME": "/"}, "must not be the filesystem root"),
    _stream("topic-pattern-empty", {"STREAMWARDEN_TOPIC_PATTERN": ""}, "STREAMWARDEN_TOPIC_PATTERN=''"),
    _stream("topic-pattern-not-a-regex", {"STREAMWARDEN_TOPIC_PATTERN": "(["}, "not a valid regular expression"),
    _stream("starting-offset-negative", {"STREAMWARDEN_STARTING_OFFSETS": '{"sites-0": {"0": -3}}'},
            "offset -3 is below -2"),
    _stream("starting-partition-not-a-number", {"STREAMWARDEN_STARTING_OFFSETS": '{"sites-0": {"abc": 1}}'},
            "partition 'abc' is not a partition number"),
    _stream("starting-offsets-empty-object", {"STREAMWARDEN_STARTING_OFFSETS": "{}"}, "topic -> {partition: offset}"),
    _stream("bootstrap-not-a-host", {"STREAMWARDEN_BOOTSTRAP_SERVERS": "not a host"}, "'not a host' is not host:port"),
    _stream("bootstrap-empty", {"STREAMWARDEN_BOOTSTRAP_SERVERS": ""}, "STREAMWARDEN_BOOTSTRAP_SERVERS=''"),
    _stream("bootstrap-port-out-of-range", {"STREAMWARDEN_BOOTSTRAP_SERVERS": "h:70000"}, "'h:70000' is not host:port"),
    _stream("schema-reuses-offset", {"STREAMWARDEN_TABLE_SCHEMA": '{"offset": "long"}'},
            "output columns ['offset'] reuse framework columns"),
    _stream("schema-reuses-topic", {"STREAMWARDEN_TABLE_SCHEMA": '{"topic": "string"}'},
            "output columns ['topic'] reuse framework columns"),
    _stream("schema-reuses-event-date", {"STREAMWARDEN_TABLE_SCHEMA": '{"event_date": "string"}'},
            "output columns ['event_date'] reuse framework columns"),
    _stream("schema-reuses-the-handlers-op", {"STREAMWARDEN_TABLE_SCHEMA": '{"op": "string"}'},
            "output columns ['op'] appear twice"),
    _stream("schema-repeats-a-key", {"STREAMWARDEN_TABLE_SCHEMA": '{"a": "long", "a": "string"}'},
            "column 'a': defined twice"),
    _stream("schema-unknown-type", {"STREAMWARDEN_TABLE_SCHEMA": '{"a": "decimal"}'}, "unknown type 'decimal'"),
    _stream("partition-by-repeated", {"STREAMWARDEN_OUTPUT_PARTITION_BY": "hour,hour"}, "named twice"),
    _stream("handler-module-missing", {"STREAMWARDEN_SESSION_HANDLER": "no_such_module.handlers:Handler"},
            "session handler 'no_such_module.handlers:Handler' cannot be loaded"),
    _stream("handler-not-a-handler", {"STREAMWARDEN_SESSION_HANDLER": "streamwarden.wire:TableSchema"}, "lacks"),
    _stream("spark-master-local-0", {"STREAMWARDEN_SPARK_MASTER": "local[0]"}, "STREAMWARDEN_SPARK_MASTER='local[0]'"),
    _stream("pipeline-unknown", {"STREAMWARDEN_PIPELINE": "tables"}, "STREAMWARDEN_PIPELINE='tables'"),
    _stream("trigger-not-a-duration", {"STREAMWARDEN_TRIGGER_INTERVAL": "soon"}, "expected a duration"),
    _stream("trigger-zero", {"STREAMWARDEN_TRIGGER_INTERVAL": "0s"}, "must be greater than zero"),
    _stream("max-offsets-zero", {"STREAMWARDEN_MAX_OFFSETS_PER_TRIGGER": "0"}, "greater than 0"),
    _stream("tier-unknown", {"STREAMWARDEN_INTEGRITY_TIER": "paranoid"}, "'none', 'fuzzy' or 'strict'"),
    _stream("buckets-zero", {"STREAMWARDEN_SESSION_BUCKETS": "0"}, "STREAMWARDEN_SESSION_BUCKETS='0'"),
    _stream("query-name-with-a-slash", {"STREAMWARDEN_QUERY_NAME": "a/b"}, "STREAMWARDEN_QUERY_NAME='a/b'"),
    _stream("fail-on-data-loss-maybe", {"STREAMWARDEN_FAIL_ON_DATA_LOSS": "maybe"}, "valid boolean"),
    _stream("max-message-bytes-negative", {"STREAMWARDEN_MAX_MESSAGE_BYTES": "-1"}, "greater than 0"),
    _stream("kafka-config-a-list", {"STREAMWARDEN_KAFKA_CONFIG": "[1, 2]"}, "expected a JSON object"),
    _stream("kafka-config-nested", {"STREAMWARDEN_KAFKA_CONFIG": '{"a": {"b": 1}}'}, "key 'a': expected a string"),
    _stream("kafka-config-key-twice", {"STREAMWARDEN_KAFKA_CONFIG": '{"acks": "1", "acks": "all"}'},
            "key 'acks' is given twice"),
    _status("warden-keepup-ratio-above-one", {"STREAMWARDEN_WARDEN_KEEPUP_RATIO": "5"}, "less than or equal to 1"),
    _status("warden-backoff-base-above-max", {"STREAMWARDEN_WARDEN_BACKOFF_BASE": "900s"},
            "STREAMWARDEN_WARDEN_BACKOFF_BASE (900s) must not exceed STREAMWARDEN_WARDEN_BACKOFF_MAX (600s)"),
    _status("warden-webhook-not-http", {"STREAMWARDEN_WARDEN_WEBHOOK_URL": "ftp://x"},
            "STREAMWARDEN_WARDEN_WEBHOOK_URL"),
    Case("stop-wait-nan", ("stop", "--wait", "nan"), exit_code=2, says="expected a number of seconds >= 0"),
    Case("stop-wait-negative", ("stop", "--wait", "-5"), exit_code=2, says="expected a number of seconds >= 0"),
    Case("broker-port-not-a-number", ("broker", "--port", "abc"), exit_code=2, says="expected a TCP port"),
    _stream("shuffle-partitions-beyond-spark", {"STREAMWARDEN_SHUFFLE_PARTITIONS": "100000000000"},
            "STREAMWARDEN_SHUFFLE_PARTITIONS='100000000000': Input should be less than or equal to 10000"),
    _stream("output-root-of-an-unknown-user", {"STREAMWARDEN_OUTPUT_ROOT": "~nosuchuser/x"},
            "STREAMWARDEN_OUTPUT_ROOT='~nosuchuser/x': ~nosuchuser names no user"),
    Case("stream-without-a-broker", ("stream",),
         {"STREAMWARDEN_BOOTSTRAP_SERVERS": "127.0.0.1:{free_port}", "STREAMWARDEN_BROKER_TIMEOUT": "3s"},
         exit_code=75, says="the broker at 127.0.0.1:{free_port} did not answer within 3s before the stream started"),
    Case("produce-without-a-broker", ("produce", "--max-messages", "1"),
         {"STREAMWARDEN_BOOTSTRAP_SERVERS": "127.0.0.1:{free_port}"}, exit_code=75,
         says="ENVIRONMENT: cannot reach the broker at 127.0.0.1:{free_port}"),
]


@pytest.fixture()
def taken_port() -> Iterator[int]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield int(listener.getsockname()[1])


def _run(args: tuple[str, ...], env: dict[str, str], home: Path) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("STREAMWARDEN_")}
    full.update({"STREAMWARDEN_HOME": str(home), **env})
    return subprocess.run([sys.executable, "-m", "streamwarden", *args], env=full, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)


def _assert_clean_refusal(run: subprocess.CompletedProcess[str], exit_code: int, says: str) -> None:
    output = run.stdout + run.stderr
    assert run.returncode == exit_code, output[-3000:]
    assert says in run.stderr, run.stderr[-3000:]
    assert "Traceback" not in output, output[-3000:]
    assert "Running Spark version" not in output and "SparkContext" not in output  # refused before Spark


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_bad_input_is_refused_with_its_exit_code_and_a_clear_message(case: Case, tmp_path: Path) -> None:
    port = str(free_port())

    def expand(text: str) -> str:
        return text.replace("{tmp}", str(tmp_path)).replace("{free_port}", port)

    for name, content in case.files.items():
        (tmp_path / name).write_text(content)
    home = tmp_path / "home"
    run = _run(case.args, {k: expand(v) for k, v in case.env.items()}, home)
    _assert_clean_refusal(run, case.exit_code, expand(case.says))
    if case.failure_document:
        document = json.loads((home / "run" / "last_failure.json").read_text())
        assert document["failure_class"] == "CONFIG" and document["exit_code"] == 78
        assert expand(case.says) in document["message"]


def test_a_broker_on_a_taken_port_is_an_environment_failure(taken_port: int, tmp_path: Path) -> None:
    run = _run(("broker", "--port", str(taken_port)), {}, tmp_path)
    _assert_clean_refusal(run, 75, f"port {taken_port} on 127.0.0.1 is already taken")


@pytest.mark.parametrize("corrupt", ["heartbeat.json", "last_failure.json"])
def test_status_reports_a_corrupt_run_file_instead_of_crashing(corrupt: str, tmp_path: Path) -> None:
    (tmp_path / "run").mkdir(parents=True)
    (tmp_path / "run" / corrupt).write_text('{"torn": ')
    run = _run(("status",), {}, tmp_path)
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    status = json.loads(run.stdout)
    assert list(status["unreadable"]) == [str(tmp_path / "run" / corrupt)]
    assert status["running"] is False


def test_there_are_at_least_forty_cases() -> None:
    assert len(CASES) + 3 >= 40
