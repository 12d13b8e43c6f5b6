"""Settings: one typed object, public env names, and one clear message for every invalid value."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from streamwarden.settings import SettingsError, load_settings


def test_defaults_derive_every_root_from_home(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path)
    assert settings.root("output") == tmp_path / "output"
    assert settings.checkpoint_location == tmp_path / "checkpoint" / "streamwarden"
    assert settings.integrity_tier == "strict" and settings.trigger_interval == 5.0


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
