"""A loopback S3 server (moto's, on 127.0.0.1, dummy credentials) for the object-store tests.

``loopback_s3()`` runs one (the ``s3_endpoint`` fixture of ``conftest.py`` yields its URL, with an empty
bucket ``BUCKET`` in it); ``storage_options(url)`` is what delta-rs and pyarrow need to reach it.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from pyarrow import fs

BUCKET = "lake"
SECRET = "moto-dummy-secret-7f3a"  # moto accepts any credentials; this one must never be printed


@contextmanager
def loopback_s3(*, in_process: bool = False) -> Iterator[str]:
    """A loopback S3 server with an empty bucket: its URL. In its own process unless ``in_process``.

    In a thread of the test process only for a test that must watch the requests (it can patch moto's
    handlers) and calls no delta-rs method that holds the GIL while it waits for the store
    (``DeltaTable.history`` does): the server thread could then never answer.
    """
    if in_process:
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # a line per request otherwise
        threaded = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        threaded.start()
        host, port = threaded.get_host_and_port()
        try:
            yield _with_bucket(host, port, lambda: True)
        finally:
            threaded.stop()
        return
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield _with_bucket("127.0.0.1", port, lambda: server.poll() is None)
    finally:
        server.terminate()
        server.wait(30)


def _with_bucket(host: str, port: int, alive: Callable[[], bool]) -> str:
    """Create the bucket once the server answers (within a minute); the server's URL."""
    store = fs.S3FileSystem(access_key="moto-dummy", secret_key=SECRET, region="us-east-1", scheme="http",
                            endpoint_override=f"{host}:{port}", allow_bucket_creation=True)
    deadline = time.monotonic() + 60
    while True:
        try:
            store.create_dir(BUCKET)
            return f"http://{host}:{port}"
        except OSError:
            if time.monotonic() > deadline or not alive():
                raise
            time.sleep(0.2)


def storage_options(endpoint: str) -> dict[str, str]:
    return {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "moto-dummy", "AWS_SECRET_ACCESS_KEY": SECRET,
            "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}
