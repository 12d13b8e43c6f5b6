"""The stream seen from Airflow: settings from ``STREAMWARDEN_*`` with the active release's over them (what every
launch runs), spark-submit from a Spark connection."""

from __future__ import annotations

import logging
from pathlib import Path

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.smtp.hooks.smtp import SmtpHook
from airflow.sdk import BaseHook

from streamwarden.alerts import Alert, Notifier, already_sent, dispatch
from streamwarden.settings import Settings
from streamwarden.upgrade.release import load_release_settings
from streamwarden.warden.alerts import notifiers
from streamwarden.warden.health import Assessment, assess
from streamwarden.warden.launcher import start_stream_detached, venv_bin
from streamwarden.warden.restart_policy import RestartHistory, load_history
from streamwarden.warden.settings import WardenSettings, load_warden_settings
from streamwarden.warden.stop import StopOutcome, stop_stream


class StreamwardenHook(BaseHook):
    """Judges the stream's health, starts it detached through spark-submit, stops it, sends alerts.

    The spark-submit command comes from the Spark provider and the ``spark_conn_id`` connection; its
    master must equal ``STREAMWARDEN_SPARK_MASTER`` (a missing connection silently means YARN in the
    provider, so a mismatch is an error here rather than a surprise on the cluster). The settings are the
    environment's with the active release's over them (``<run_root>/release/active.json``, made active by
    ``upgrade_stream``), so a restart by the warden runs the release an upgrade left in force.
    """

    conn_name_attr = "spark_conn_id"
    default_conn_name = "spark_default"
    hook_name = "Streamwarden"

    def __init__(self, spark_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.spark_conn_id = spark_conn_id
        self.settings: Settings = load_release_settings()  # the active release applies (upgrade_stream)
        self.warden: WardenSettings = load_warden_settings()

    def assess(self) -> Assessment:
        return assess(self.settings, self.warden)

    def history(self) -> RestartHistory:
        return load_history(self.settings)

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

    def start_stream(self) -> int:
        """Launch the stream detached; the pid of its driver once it holds the lease."""
        return start_stream_detached(self.settings, build_command=self.spark_submit_command,
                                     lease_timeout=self.warden.lease_timeout)

    def stop_stream(self) -> StopOutcome:
        return stop_stream(self.settings, drain_timeout=self.warden.drain_timeout,
                           term_timeout=self.warden.term_timeout)

    def send_alert(self, alert: Alert) -> dict[str, str]:
        """Deliver through the log, the webhook and e-mail (when configured); recorded in alerts.jsonl."""
        logger = logging.getLogger("streamwarden.warden.alerts")
        backends: list[Notifier] = notifiers(self.warden, logger, self._send_email)
        return dispatch(alert, backends, self.settings.run_paths.alerts)

    def send_alert_once(self, alert: Alert) -> bool:
        """Send ``alert`` unless one with its cause key was sent before (then it is only logged); True when sent."""
        if alert.key is not None and already_sent(self.settings.run_paths.alerts, alert.key):
            logging.getLogger("streamwarden.warden.alerts").warning("alerted before (key %s): %s", alert.key,
                                                                    alert.summary)
            return False
        self.send_alert(alert)
        return True

    def _send_email(self, recipients: list[str], subject: str, html: str) -> None:
        with SmtpHook(smtp_conn_id=self.warden.smtp_conn_id) as smtp:
            smtp.send_email_smtp(to=recipients, subject=subject, html_content=html)
