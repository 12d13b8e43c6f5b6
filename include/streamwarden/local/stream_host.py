"""The rehearsal's stream host: ``streamwarden stream-host`` on loopback, where the warden launches the stream.

``up --topology cluster`` runs it beside Airflow's components, as the compose file's ``stream-host`` service
runs it beside theirs: the warden (in an Airflow task) reaches it through the SSH connection ``stream_host``
with a key made for it, so the stream's driver is never a child of an Airflow component. The host key is
pinned in the connection; the warden's key may run ``streamwarden launch`` and ``halt`` only.
"""

from __future__ import annotations

import getpass
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

from streamwarden.failures import EnvironmentFailure
from streamwarden.local.broker import LOOPBACK, free_port, port_in_use
from streamwarden.settings_loading import WARDEN_ENV_PREFIX
from streamwarden.stream_host.sshd import make_key
from streamwarden.warden.launcher import venv_bin

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable

CONN_ID = "stream_host"


class LocalStreamHost:
    """The stream host's process, its keys under ``folder/keys``, and the Airflow settings that point at it."""

    def __init__(self, folder: Path, log_path: Path,
                 spawn: Callable[[list[str], dict[str, str], Path, Path], subprocess.Popen[bytes]]) -> None:
        self.folder = folder
        self.log_path = log_path
        self.spawn = spawn
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.env: dict[str, str] = {}

    @property
    def host_key(self) -> Path:
        return self.folder / "keys" / "host_ed25519"

    @property
    def warden_key(self) -> Path:
        """The warden's private key (the Airflow connection names it by path)."""
        return self.folder / "keys" / "warden_ed25519"

    @property
    def authorized_keys(self) -> Path:
        return self.folder / "keys" / "authorized_keys"

    def command(self) -> list[str]:
        return [str(venv_bin() / "streamwarden"), "stream-host", "--listen", LOOPBACK, "--port", str(self.port),
                "--host-key", str(self.host_key), "--authorized-keys", str(self.authorized_keys),
                "--folder", str(self.folder)]

    def start(self, env: dict[str, str] | None = None, timeout: float = 30.0) -> None:
        """Make the keys (once per home), start the host with ``env`` (the platform's settings: what every launch
        there runs with; the last ones again on a restart) and wait until it listens."""
        self.env = self.env if env is None else env
        make_key(self.host_key)
        self.authorized_keys.write_text(f"{make_key(self.warden_key)} warden\n")
        self.process = self.spawn(self.command(), self.env, self.log_path, self.folder)
        deadline = time.monotonic() + timeout
        while not port_in_use(LOOPBACK, self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise EnvironmentFailure(f"the stream host did not listen on {LOOPBACK}:{self.port}; see "
                                         f"{self.log_path}")
            time.sleep(0.1)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def airflow_env(self) -> dict[str, str]:
        """The warden's SSH connection to the host (its key by path, the host key pinned) and the setting that
        makes the warden use it."""
        connection = {"conn_type": "ssh", "host": LOOPBACK, "port": self.port, "login": getpass.getuser(),
                      "extra": {"key_file": str(self.warden_key), "host_key": make_key(self.host_key)}}
        return {f"AIRFLOW_CONN_{CONN_ID.upper()}": json.dumps(connection),
                f"{WARDEN_ENV_PREFIX}STREAM_HOST_CONN_ID": CONN_ID}
