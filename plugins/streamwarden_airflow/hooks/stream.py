"""The stream seen from Airflow: settings from ``STREAMWARDEN_*`` with the active release's over them (what every
launch runs), spark-submit from a Spark connection, run on this host or on the stream host over SSH."""

from __future__ import annotations

import logging
import shlex
from pathlib import Path

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.smtp.hooks.smtp import SmtpHook
from airflow.providers.ssh.hooks.ssh import SSHHook
from airflow.sdk import BaseHook

from streamwarden.alerts import Alert, Notifier, already_sent, dispatch
from streamwarden.settings import Settings
from streamwarden.stream_host.client import HostReply, halt_on_host, launch_on_host
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

    With ``STREAMWARDEN_WARDEN_STREAM_HOST_CONN_ID`` set, the stream is launched and halted on the stream host
    through that SSH connection (the same spark-submit options, that host's job script and environment), so
    restarting an Airflow component never ends it.
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

    def start_stream(self, standby: bool = False) -> int:
        """Launch the stream (or its warm standby) detached, here or on the stream host; the pid of its driver once
        it holds the lease (the standby lease)."""
        host = self.warden.stream_host_conn_id
        if host is None:
            return start_stream_detached(self.settings, build_command=self.spark_submit_command,
                                         lease_timeout=self.warden.lease_timeout, standby=standby)
        options = self.spark_submit_command(self.settings, Path("stream.py"))[1:-1]
        self.log.info("launching the stream%s on the stream host %r", "'s standby" if standby else "", host)
        return launch_on_host(self._run_on_host, host, options, self.warden.lease_timeout, standby=standby)

    def stop_stream(self) -> StopOutcome:
        host = self.warden.stream_host_conn_id
        if host is None:
            return stop_stream(self.settings, drain_timeout=self.warden.drain_timeout,
                               term_timeout=self.warden.term_timeout)
        self.log.info("halting the stream on the stream host %r", host)
        return halt_on_host(self._run_on_host, host, self.warden.drain_timeout, self.warden.term_timeout)

    def _run_on_host(self, argv: list[str], timeout: float) -> HostReply:
        """``argv`` on the stream host over SSH; a connection that fails is a reply with status 255, as ssh's."""
        ssh = SSHHook(ssh_conn_id=self.warden.stream_host_conn_id, cmd_timeout=timeout)
        try:
            with ssh.get_conn() as client:
                status, out, err = ssh.exec_ssh_client_command(client, shlex.join(argv), get_pty=False,
                                                               environment=None, timeout=timeout)
        except Exception as exc:  # paramiko's errors, the socket's, a timeout: the host did not answer
            return HostReply(255, "", f"{type(exc).__name__}: {exc}")
        return HostReply(status, out.decode(errors="replace"), err.decode(errors="replace"))

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
