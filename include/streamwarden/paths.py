"""Every file and folder Streamwarden keeps under its home and its run root, named in one place.

The roots are settings (``STREAMWARDEN_HOME``; ``STREAMWARDEN_RUN_ROOT``, by default ``<home>/run``); what lies
under them is named here, so that the job, the warden, the DAGs, the page and ``up`` read and write the same
files, and a person finds each of them in one list (``settings.run_paths``, ``settings.home_paths``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RunPaths:
    """The run root: what the stream, the warden and the DAGs beside it record while the platform runs."""

    root: Path

    @property
    def heartbeat(self) -> Path:
        """The stream's heartbeat, written after every batch (``runfiles.heartbeat``)."""
        return self.root / "heartbeat.json"

    @property
    def stop_marker(self) -> Path:
        """A graceful stop's request: the stream drains and exits when it appears."""
        return self.root / "stop"

    @property
    def failure(self) -> Path:
        """The stream's exit document: the failure class, its evidence (``runfiles.failure_file``)."""
        return self.root / "last_failure.json"

    @property
    def previous_failure(self) -> Path:
        """The failure document a new stream process found when it took the lease, moved aside."""
        return self.root / "previous_failure.json"

    @property
    def hold(self) -> Path:
        """The hold a recovery or an upgrade puts on the warden's restarts (``runfiles.hold``)."""
        return self.root / "hold.json"

    @property
    def launch(self) -> Path:
        """The warden's record of the stream it launched last."""
        return self.root / "launch.json"

    @property
    def standby_launch(self) -> Path:
        """The last launched warm standby (its own record: the stream's is ``launch.json``)."""
        return self.root / "standby-launch.json"

    @property
    def platform(self) -> Path:
        """The ``streamwarden up`` running on this home, for ``up``'s next start and the long run."""
        return self.root / "platform.json"

    @property
    def alerts(self) -> Path:
        """Every alert sent, one JSON line each (``streamwarden.alerts``)."""
        return self.root / "alerts.jsonl"

    @property
    def logs(self) -> Path:
        """The logs of the stream and of ``up``'s components, rolled over and pruned (``streamwarden.logs``)."""
        return self.root / "logs"

    def stream_log(self, stamp: str) -> Path:
        """The log of the stream the warden launched at ``stamp``."""
        return self.logs / f"stream-{stamp}.log"

    @property
    def restart_history(self) -> Path:
        """The warden's starts of the stream, for its backoff and circuit breaker."""
        return self.root / "warden" / "restarts.json"

    @property
    def lag_history(self) -> Path:
        """The warden's lag observations per partition, the window Burrow's rules judge."""
        return self.root / "warden" / "lag_history.json"

    @property
    def health(self) -> Path:
        """The warden's last health verdict and what it saw."""
        return self.root / "warden" / "health.json"

    @property
    def spill(self) -> Path:
        """Where the DuckDB queries of validation, recovery and the page spill what does not fit their memory."""
        return self.root / "spill"

    @property
    def maintenance(self) -> Path:
        """``maintain_tables``' reports and its request record."""
        return self.root / "maintenance"

    @property
    def validation(self) -> Path:
        """``validate_output``'s reports and the last validated versions."""
        return self.root / "validation"

    @property
    def data_docs(self) -> Path:
        """Great Expectations' Data Docs of the validation runs."""
        return self.root / "data_docs"

    @property
    def session_restarts(self) -> Path:
        """``restart_sessions``' reports: each site's answer to its restart."""
        return self.root / "session_restarts"

    @property
    def recoveries(self) -> Path:
        """``recover_stream``'s folders, one per recovery (its plan, archived checkpoint, report)."""
        return self.root / "recoveries"

    def recovery(self, recovery_id: str) -> Path:
        """The folder of one recovery."""
        return self.recoveries / recovery_id

    @property
    def recoveries_log(self) -> Path:
        """Every recovery executed, one JSON line each."""
        return self.root / "recoveries.jsonl"

    @property
    def upgrades(self) -> Path:
        """``upgrade_stream``'s journals, one per upgrade."""
        return self.root / "upgrades"

    @property
    def active_release(self) -> Path:
        """The release the stream runs with (``upgrade.release``)."""
        return self.root / "release" / "active.json"


@dataclass(frozen=True)
class HomePaths:
    """The home: what ``up`` keeps beside the roots."""

    root: Path

    @property
    def airflow(self) -> Path:
        """``up``'s Airflow home: its SQLite database, task logs, the generated admin password."""
        return self.root / "airflow"

    @property
    def archive(self) -> Path:
        """Earlier runs' state, archived by ``up`` when its embedded broker starts empty."""
        return self.root / "archive"

    @property
    def releases(self) -> Path:
        """The releases ``upgrade_stream`` may move the stream to, one YAML file each."""
        return self.root / "releases"

    @property
    def up_lock(self) -> Path:
        """The lock of the ``up`` running on this home: a second one is refused. In the home, not the run root:
        the run root is archived while the lock is held."""
        return self.root / "up.lock"
