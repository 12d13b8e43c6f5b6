"""A loopback S3 server (moto's, on 127.0.0.1, dummy credentials) for the object-store tests.

Import ``endpoint`` (a module-scoped fixture: the server's URL, an empty bucket ``BUCKET`` in it) and
``storage_options(endpoint)`` (what delta-rs and pyarrow need to reach it) into a test module.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from pyarrow import fs

BUCKET = "lake"
SECRET = "moto-dummy-secret-7f3a"  # moto accepts any credentials; this one must never be printed


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    """A loopback S3 server with an empty bucket, in its own process.

    Not in a thread of the test process: some delta-rs calls (``DeltaTable.history``) hold the GIL while
    they wait for the store, and a server thread in the same interpreter could then never answer.
    """
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    store = fs.S3FileSystem(access_key="moto-dummy", secret_key=SECRET, region="us-east-1", scheme="http",
                            endpoint_override=f"127.0.0.1:{port}", allow_bucket_creation=True)
    deadline = time.monotonic() + 60
    while True:
        try:
            store.create_dir(BUCKET)
            break
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                raise
            time.sleep(0.2)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(30)


def storage_options(endpoint: str) -> dict[str, str]:
    return {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "moto-dummy", "AWS_SECRET_ACCESS_KEY": SECRET,
            "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}
