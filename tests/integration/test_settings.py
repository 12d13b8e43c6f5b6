"""Settings: one typed object, public env names, and one clear message for every invalid value."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from streamwarden.settings import Settings, load_settings
from streamwarden.settings_loading import SettingsError
from streamwarden.stream.spark_session import spark_conf


def test_defaults_derive_every_root_from_home(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path)
    assert settings.root("output") == tmp_path / "output"
    assert settings.checkpoint_location == tmp_path / "checkpoint" / "streamwarden"
    assert settings.integrity_tier == "strict" and settings.trigger_interval == 3.0


def test_public_environment_names(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    env = {
        "STREAMWARDEN_BOOTSTRAP_SERVERS": "broker-1:9093,broker-2:9093",
        "STREAMWARDEN_TOPIC_PATTERN": "plant-.*",
        "STREAMWARDEN_OUTPUT_ROOT": str(tmp_path / "o"),
        "STREAMWARDEN_CHECKPOINT_ROOT": str(tmp_path / "c"),
        "STREAMWARDEN_RUN_ROOT": str(tmp_path / "r"),
        "STREAMWARDEN_TRIGGER_INTERVAL": "500ms",
        "STREAMWARDEN_MAX_OFFSETS_PER_TRIGGER": "100000",
        "STREAMWARDEN_INTEGRITY_TIER": "fuzzy",
        "STREAMWARDEN_SPARK_MASTER": "spark://127.0.0.1:7077",
        "STREAMWARDEN_KAFKA_CONFIG": '{"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}',
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = load_settings()
    assert settings.bootstrap_servers == "broker-1:9093,broker-2:9093"
    assert settings.root("run") == tmp_path / "r" and settings.trigger_interval == 0.5
    assert settings.max_offsets_per_trigger == 100_000 and settings.integrity_tier == "fuzzy"
    assert settings.kafka_client_config()["security.protocol"] == "SASL_SSL"
    reformatted = {"STREAMWARDEN_TRIGGER_INTERVAL", "STREAMWARDEN_KAFKA_CONFIG"}
    exported = settings.to_env()
    assert all(exported[k] == v for k, v in env.items() if k not in reformatted)


def test_yaml_file_is_read_and_environment_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = tmp_path / "streamwarden.yaml"
    config.write_text("topic_pattern: 'yaml-.*'\nintegrity_tier: none\n")
    monkeypatch.setenv("STREAMWARDEN_CONFIG_FILE", str(config))
    monkeypatch.setenv("STREAMWARDEN_INTEGRITY_TIER", "fuzzy")
    settings = load_settings()
    assert settings.topic_pattern == "yaml-.*" and settings.integrity_tier == "fuzzy"


@pytest.mark.parametrize(("name", "value", "says"), [
    ("integrity_tier", "paranoid", "'none', 'fuzzy' or 'strict'"),
    ("trigger_interval", "soon", "duration"),
    ("spark_master", "mesos://x", "spark://host:port"),
    ("topic_pattern", "([", "regular expression"),
    ("starting_offsets", '{"bad topic!": {"0": 1}}', "not a valid Kafka topic name"),
    ("max_offsets_per_trigger", "0", "greater than 0"),
    ("output_partition_by", "topic,minute", "allowed: topic, date, hour"),
    ("shuffle_partitions", "100000000000", "less than or equal to 10000"),
    ("spark_conf", '{"spark.sql.shuffle.partitions": "100000000000"}', "a whole number from 1 to 10,000"),
    ("output_root", "~nosuchuser/x", "~nosuchuser names no user"),
    ("home", "~nosuchuser/x", "~nosuchuser names no user"),
])
def test_invalid_setting_names_the_variable_and_the_allowed_values(name: str, value: str, says: str) -> None:
    with pytest.raises(SettingsError) as error:
        load_settings(**{name: value})
    assert f"STREAMWARDEN_{name.upper()}" in str(error.value)
    assert says in str(error.value)


def test_cli_exits_nonzero_with_one_clear_message(tmp_path: Path) -> None:
    env = {**os.environ, "STREAMWARDEN_HOME": str(tmp_path), "STREAMWARDEN_INTEGRITY_TIER": "bogus"}
    result = subprocess.run([sys.executable, "-m", "streamwarden", "status"], env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 78
    assert "STREAMWARDEN_INTEGRITY_TIER='bogus'" in result.stderr
    assert "Traceback" not in result.stderr


def test_stream_with_invalid_settings_documents_a_config_failure(tmp_path: Path) -> None:
    from streamwarden.failures import FailureClass
    from streamwarden.runfiles.failure_file import read_failure

    env = {**os.environ, "STREAMWARDEN_HOME": str(tmp_path), "STREAMWARDEN_TRIGGER_INTERVAL": "soon"}
    result = subprocess.run([sys.executable, "-m", "streamwarden", "stream"], env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 78
    failure = read_failure(tmp_path / "run" / "last_failure.json")
    assert failure is not None and failure.failure_class is FailureClass.CONFIG
    assert "STREAMWARDEN_TRIGGER_INTERVAL" in failure.message


@pytest.mark.parametrize(("given", "uri", "delta"), [
    ("s3://lake/out", "s3://lake/out", "s3://lake/out/t"),
    ("s3a://lake//out/", "s3a://lake/out", "s3://lake/out/t"),
    ("S3://lake", "s3://lake", "s3://lake/t"),
    ("gs://my-bucket/a/b", "gs://my-bucket/a/b", "gs://my-bucket/a/b/t"),
    ("abfss://data@acct01.dfs.core.windows.net/out", "abfss://data@acct01.dfs.core.windows.net/out",
     "abfss://data@acct01.dfs.core.windows.net/out/t"),
    ("az://data/out", "az://data/out", "az://data/out/t"),
])
def test_an_object_store_output_root_is_the_uri_delta_rs_opens(tmp_path: Path, given: str, uri: str,
                                                                 delta: str) -> None:
    from streamwarden.storage import StoreUri

    settings = load_settings(home=tmp_path, output_root=given,
                             storage_options={"AZURE_STORAGE_ACCOUNT_NAME": "acct01"})
    location = settings.output_location
    assert isinstance(location, StoreUri) and str(location) == uri == settings.output_root
    assert (location / "t").delta_uri == delta
    assert settings.to_env()["STREAMWARDEN_OUTPUT_ROOT"] == uri
    assert not (tmp_path / "output").exists()
    with pytest.raises(ValueError, match="not a local folder"):
        settings.root("output")


def test_a_file_uri_output_root_is_a_local_folder_with_every_check(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path, output_root=f"file://{tmp_path}/out")
    assert settings.root("output") == settings.output_location == tmp_path / "out"
    (tmp_path / "afile").write_text("x")
    with pytest.raises(SettingsError, match="exists and is not a folder"):
        load_settings(home=tmp_path, output_root=f"file://{tmp_path}/afile")


@pytest.mark.parametrize(("value", "says"), [
    ("hdfs://namenode/out", "unknown scheme 'hdfs'; allowed: a local path, file://, s3://"),
    ("s3://", "s3:// needs a bucket or container"),
    ("gs:///out", "gs:// needs a bucket or container"),
    ("s3:/lake/out", "s3: must be followed by //"),
    ("s3://Lake/out", "'Lake' is not a bucket or container name"),
    ("s3://lake/a/../b", "must not contain . or .. segments"),
    ("s3://lake/out?versionId=1", "no query"),
    ("abfss://data/out", "abfss:// needs the account"),
    ("az://data/out", "az:// needs the account: give azure_storage_account_name in STREAMWARDEN_STORAGE_OPTIONS"),
    ("file://host/out", "file:///absolute/path (no host)"),
])
def test_an_invalid_output_uri_names_the_variable(tmp_path: Path, value: str, says: str) -> None:
    with pytest.raises(SettingsError) as error:
        load_settings(home=tmp_path, output_root=value)
    assert f"STREAMWARDEN_OUTPUT_ROOT={value!r}" in str(error.value) and says in str(error.value)


def test_credentials_in_the_output_uri_are_refused_and_not_echoed(tmp_path: Path) -> None:
    with pytest.raises(SettingsError) as error:
        load_settings(home=tmp_path, output_root="s3://AKIAEXAMPLE:wJalrXUtnFEMIexample@lake/out",
                      storage_options={"AWS_SECRET_ACCESS_KEY": "moto-dummy-secret-7f3a"})
    message = str(error.value)
    assert "credentials do not belong in the URI" in message and "STREAMWARDEN_STORAGE_OPTIONS" in message
    assert "wJalrXUtnFEMIexample" not in message and "moto-dummy-secret-7f3a" not in message


def test_read_tasks_are_one_per_core_of_a_local_master_unless_set() -> None:
    assert Settings(spark_master="local[3]").read_tasks == 3
    assert Settings(spark_master="local").read_tasks == 1
    assert Settings(spark_master="local[*]").read_tasks == (os.cpu_count() or 1)
    assert Settings(spark_master="spark://127.0.0.1:7077").read_tasks == 8  # cores unknown to the driver
    assert Settings(spark_master="local[3]", max_read_tasks=0).read_tasks == 0  # one per topic-partition
    assert Settings(spark_master="local[3]", max_read_tasks=5).read_tasks == 5


def test_state_partitions_are_one_per_core_of_a_local_master_unless_set() -> None:
    assert Settings(spark_master="local[3]").state_partitions == 3
    assert Settings(spark_master="local[*]").state_partitions == (os.cpu_count() or 1)
    assert Settings(spark_master="spark://127.0.0.1:7077").state_partitions == 8
    assert Settings(spark_master="local[3]", shuffle_partitions=5).state_partitions == 5
    conf = spark_conf(Settings(spark_master="local[3]"))
    assert conf["spark.sql.shuffle.partitions"] == conf["spark.default.parallelism"] == "3"


def test_shuffle_partitions_given_to_spark_through_spark_conf_are_the_state_partitions() -> None:
    given = Settings(spark_master="local[2]", shuffle_partitions=3, spark_conf={"spark.sql.shuffle.partitions": "5"})
    assert given.state_partitions == 5  # what Spark is given wins, so labels are balanced for it
    assert given.state_buckets == 40
    assert spark_conf(given)["spark.sql.shuffle.partitions"] == spark_conf(given)["spark.default.parallelism"] == "5"
    for bad in ("x", "0", "-2"):
        with pytest.raises(ValueError, match=r"spark\.sql\.shuffle\.partitions must be a whole number from 1"):
            Settings(spark_conf={"spark.sql.shuffle.partitions": bad})


def test_a_new_checkpoints_session_buckets_are_eight_per_state_partition_unless_set() -> None:
    assert Settings(spark_master="local[2]").state_buckets == 16
    assert Settings(spark_master="spark://127.0.0.1:7077").state_buckets == 64
    assert Settings(spark_master="local[2]", shuffle_partitions=3).state_buckets == 24
    assert Settings(spark_master="local[2]", session_buckets=5).state_buckets == 5
