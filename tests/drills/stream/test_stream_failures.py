"""Every failure class ends the job with its exit code and a ``last_failure.json`` naming the cause."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from fixtures.stream_process import StreamProcess, produce_raw, stream_env
from streamwarden.failures import EXIT_CODES, FailureClass
from streamwarden.kafka.admin import create_topics, delete_topics
from streamwarden.local.broker import LocalBroker, free_port
from streamwarden.runfiles.failure_file import read_failure

pytestmark = pytest.mark.slow


def run_to_failure(job: StreamProcess, expected: FailureClass) -> dict[str, object]:
    job.start()
    assert job.wait_exit(240) == EXIT_CODES[expected], job.log_tail()
    failure = read_failure(job.settings.run_paths.failure)
    assert failure is not None, "last_failure.json written"
    assert failure.failure_class is expected, failure
    return failure.to_json()


def test_invalid_kafka_client_setting_is_config(broker: LocalBroker, tmp_path: Path) -> None:
    env = stream_env(tmp_path, broker.bootstrap_servers, "nothing-.*",
                     kafka_config=json.dumps({"no.such.property": "1"}))
    failure = run_to_failure(StreamProcess(env, tmp_path / "log"), FailureClass.CONFIG)
    assert "no.such.property" in str(failure["message"])


def test_unreachable_broker_is_environment_before_spark_starts(tmp_path: Path) -> None:
    port = free_port()
    env = {**stream_env(tmp_path, f"127.0.0.1:{port}", "nothing-.*"), "STREAMWARDEN_BROKER_TIMEOUT": "8s"}
    job = StreamProcess(env, tmp_path / "log")
    failure = run_to_failure(job, FailureClass.ENVIRONMENT)
    assert f"the broker at 127.0.0.1:{port} did not answer within 8s before the stream started" in str(
        failure["message"])
    assert "SparkContext" not in job.log_path.read_text(errors="replace")  # not Spark's start and tracebacks


def test_output_in_the_manifest_layout_of_an_earlier_release_is_config(broker: LocalBroker, tmp_path: Path) -> None:
    env = stream_env(tmp_path, broker.bootstrap_servers, "nothing-.*")
    job = StreamProcess(env, tmp_path / "log")
    manifests = job.settings.root("output") / "records" / "_manifests"
    manifests.mkdir(parents=True)
    (manifests / "0000000000-0123456789abcdef.json").write_text("{}")
    failure = run_to_failure(job, FailureClass.CONFIG)
    assert "_manifests/ from a release before Delta Lake tables" in str(failure["message"])
    assert "STREAMWARDEN_OUTPUT_ROOT" in str(failure["message"])


def test_recreated_topic_is_data_loss_naming_where(
    broker: LocalBroker, topic_factory: Callable[..., list[str]], tmp_path: Path
) -> None:
    (topic,) = topic_factory(1, partitions=2)
    ends = produce_raw(broker.bootstrap_servers, [topic], 400)
    job = StreamProcess(stream_env(tmp_path, broker.bootstrap_servers, topic), tmp_path / "log")
    job.start()
    job.wait_until(lambda: job.caught_up(ends), 240, "first consumption")
    assert job.stop() == 0
    # Retention cannot be forced on this broker (no DeleteRecords): recreate the topic instead.
    kafka = {"bootstrap.servers": broker.bootstrap_servers}
    delete_topics(kafka, [topic])
    create_topics(kafka, [topic], partitions=2)
    produce_raw(broker.bootstrap_servers, [topic], 10)
    failure = run_to_failure(job, FailureClass.DATA_LOSS)
    assert failure["topic"] == topic and failure["partition"] in (0, 1)
    assert failure["offset"] == ends[topic][int(str(failure["partition"]))]
    assert "beyond the log end" in str(failure["message"])


@pytest.mark.parametrize("failure_class", [FailureClass.MALFORMED, FailureClass.BUG])
def test_failures_raised_inside_a_batch_are_classified(
    broker: LocalBroker, topic_factory: Callable[..., list[str]], tmp_path: Path, failure_class: FailureClass
) -> None:
    (topic,) = topic_factory(1, partitions=1)
    produce_raw(broker.bootstrap_servers, [topic], 10)
    env = stream_env(tmp_path, broker.bootstrap_servers, topic,
                     **{"chaos_raise_at": f"before_commit:{failure_class.value}"})
    failure = run_to_failure(StreamProcess(env, tmp_path / "log"), failure_class)
    assert "injected" in str(failure["message"])
