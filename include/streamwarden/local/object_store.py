"""An S3 API server for the production rehearsal: moto's server as its own process on loopback, one bucket.

It holds the output tables of ``streamwarden up --topology cluster``. Its credentials are made once per home,
kept in the rehearsal's secrets file (:mod:`streamwarden.local.cluster_secrets`), and reach the stream, the
DAGs and the executors only through that file: the server accepts any key, but nothing in the repository,
a DAG or the compose file ever names one. moto keeps the objects in memory: a new ``up`` starts an empty
bucket, as it starts an empty broker.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from streamwarden.failures import EnvironmentFailure
from streamwarden.local.broker import LOOPBACK, free_port, port_in_use
from streamwarden.processes import die_with_parent

BUCKET = "streamwarden"
REGION = "us-east-1"


class LocalObjectStore:
    """moto's S3 server on ``127.0.0.1:port`` as a child process, with :data:`BUCKET` made."""

    def __init__(self, log_path: Path, death_signal: signal.Signals | None = None) -> None:
        self.log_path = log_path
        self.death_signal = death_signal
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def start(self, options: dict[str, str], timeout: float = 60.0) -> LocalObjectStore:
        """Start the server (on the same port as before when restarted) and make the bucket with ``options``
        (delta-rs's names); ENVIRONMENT when it does not come up."""
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", LOOPBACK, "-p", str(self.port)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=die_with_parent(self.death_signal) if self.death_signal else None)  # noqa: PLW1509
        deadline = time.monotonic() + timeout
        while not port_in_use(LOOPBACK, self.port):
            if self.process.poll() is not None:
                raise EnvironmentFailure(f"the S3 server exited with code {self.process.returncode}; "
                                         f"see {self.log_path}")
            if time.monotonic() > deadline:
                raise EnvironmentFailure(f"the S3 server did not listen in {timeout:.0f}s; see {self.log_path}")
            time.sleep(0.1)
        self._make_bucket(options)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def _make_bucket(self, options: dict[str, str]) -> None:
        from pyarrow import fs  # type: ignore[import-untyped, unused-ignore]

        store = fs.S3FileSystem(access_key=options["AWS_ACCESS_KEY_ID"], secret_key=options["AWS_SECRET_ACCESS_KEY"],
                                region=REGION, scheme="http", endpoint_override=f"{LOOPBACK}:{self.port}",
                                allow_bucket_creation=True)
        store.create_dir(BUCKET)
