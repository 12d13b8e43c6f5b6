"""The stream seen from Airflow: settings from ``STREAMWARDEN_*``, spark-submit from a Spark connection."""

from __future__ import annotations

from pathlib import Path

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.sdk import BaseHook

from streamwarden.control import StopOutcome, stop_stream
from streamwarden.launcher import start_stream_detached, venv_bin
from streamwarden.settings import Settings, load_settings
from streamwarden.status import StreamStatus, read_status


class StreamwardenHook(BaseHook):
    """Reads the stream's status, starts it detached through spark-submit, stops it gracefully.

    The spark-submit command comes from the Spark provider and the ``spark_conn_id`` connection; its
    master must equal ``STREAMWARDEN_SPARK_MASTER`` (a missing connection silently means YARN in the
    provider, so a mismatch is an error here rather than a surprise on the cluster).
    """

    conn_name_attr = "spark_conn_id"
    default_conn_name = "spark_default"
    hook_name = "Streamwarden"

    def __init__(self, spark_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.spark_conn_id = spark_conn_id
        self.settings: Settings = load_settings()

    def status(self) -> StreamStatus:
        return read_status(self.settings)

    def spark_submit_command(self, settings: Settings, application: Path) -> list[str]:
        """The provider's spark-submit command for ``application``, run by this environment's binary."""
        submit = SparkSubmitHook(conn_id=self.spark_conn_id, name=settings.query_name)
        command: list[str] = submit._build_spark_submit_command(str(application))
        master = command[command.index("--master") + 1]
        if master != settings.spark_master:
            raise ValueError(
                f"connection {self.spark_conn_id!r} gives master {master!r} but STREAMWARDEN_SPARK_MASTER is "
                f"{settings.spark_master!r}; make them agree (a missing connection means 'yarn')"
            )
        local_binary = venv_bin() / command[0]
        if local_binary.is_file():
            command[0] = str(local_binary)
        return command

    def start_stream(self, lease_timeout: float) -> int:
        """Launch the stream detached; the pid of its driver once it holds the lease."""
        return start_stream_detached(self.settings, build_command=self.spark_submit_command,
                                     lease_timeout=lease_timeout)

    def stop_stream(self, drain_timeout: float, term_timeout: float) -> StopOutcome:
        return stop_stream(self.settings, drain_timeout=drain_timeout, term_timeout=term_timeout)
