"""The warden launches and halts the real stream on a stream host through a real sshd and Airflow's SSH hook.

The stream host is the rehearsal's (:class:`~streamwarden.local.stream_host.LocalStreamHost`): ``streamwarden
stream-host`` on loopback, the warden's key made for it, the host key pinned in the ``stream_host`` connection.
The launched driver is a child of the host's session, never of the warden's process.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from fixtures.stream_process import produce_raw, stream_env
from streamwarden.local.broker import LocalBroker
from streamwarden.local.stream_host import LocalStreamHost
from streamwarden.settings import load_settings
from streamwarden.stream_host.gate import EXIT_REFUSED
from streamwarden.warden.launcher import (
    StreamAlreadyRunningError,
    StreamLaunchFailedError,
    read_launch_record,
    running_holder,
)
from streamwarden.warden.stop import StopMethod, stop_stream


def _spawn(command: list[str], env: dict[str, str], log_path: Path, cwd: Path) -> subprocess.Popen[bytes]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=cwd,
                                stdin=subprocess.DEVNULL, start_new_session=True)


@pytest.fixture()
def stream_host(tmp_path: Path, broker: LocalBroker, topic_factory: Callable[..., list[str]],
                monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalStreamHost]:
    """A stream host with the stream's settings, and this process set up as the warden that reaches it."""
    topics = topic_factory(1, partitions=2)
    env = stream_env(tmp_path / "home", broker.bootstrap_servers, topics[0])
    produce_raw(broker.bootstrap_servers, topics, 2_000)
    for name in [n for n in os.environ if n.startswith("STREAMWARDEN_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        if name.startswith("STREAMWARDEN_"):
            monkeypatch.setenv(name, value)
    folder = tmp_path / "stream-host"
    folder.mkdir(mode=0o700)
    host = LocalStreamHost(folder, tmp_path / "stream-host.log", _spawn)
    host.start({**os.environ, **env})
    for name, value in host.airflow_env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("STREAMWARDEN_WARDEN_DRAIN_TIMEOUT", "60s")
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    yield host
    stop_stream(load_settings(), drain_timeout=5, term_timeout=10)
    if host.process is not None:
        host.process.terminate()
        host.process.wait(10)


@pytest.mark.usefixtures("airflow_db")
def test_the_warden_launches_and_halts_the_stream_on_the_stream_host(stream_host: LocalStreamHost) -> None:
    import airflow  # noqa: F401 - puts the plugins folder on sys.path

    from streamwarden_airflow.hooks import StreamwardenHook

    settings = load_settings()
    hook = StreamwardenHook()
    pid = hook.start_stream()

    holder = running_holder(settings)
    assert holder is not None and holder.pid == pid
    record = read_launch_record(settings)
    assert record is not None and record.via.startswith("ssh 127.0.0.1 ") and record.via.endswith(
        f" 127.0.0.1 {stream_host.port}"), record
    assert os.getpid() not in [p.pid for p in psutil.Process(pid).parents()], "the driver is the warden's child"
    assert record.command[1:3] == ["--master", "local[2]"], "the Spark connection's options reach the host"
    with pytest.raises(StreamAlreadyRunningError) as running:
        hook.start_stream()
    assert running.value.holder is not None and running.value.holder.pid == pid

    stopped = hook.stop_stream()
    assert stopped.pid == pid and stopped.method in (StopMethod.DRAINED, StopMethod.TERMINATED)
    assert running_holder(settings) is None and not psutil.pid_exists(pid)


@pytest.mark.usefixtures("airflow_db")
def test_the_stream_host_refuses_other_commands_and_an_unreachable_one_is_a_failed_launch(
        stream_host: LocalStreamHost) -> None:
    import airflow  # noqa: F401 - puts the plugins folder on sys.path

    from streamwarden_airflow.hooks import StreamwardenHook

    hook = StreamwardenHook()
    refused = hook._run_on_host(["streamwarden", "tables"], 30)
    assert refused.exit_status == EXIT_REFUSED and "refused 'streamwarden tables'" in refused.stderr
    shell = hook._run_on_host(["cat", "/etc/passwd"], 30)
    assert shell.exit_status == EXIT_REFUSED and "root:" not in shell.stdout

    assert stream_host.process is not None
    stream_host.process.terminate()
    stream_host.process.wait(10)
    with pytest.raises(StreamLaunchFailedError, match="stream host stream_host gave no answer") as failed:
        hook.start_stream()
    assert failed.value.exit_code == 255 and running_holder(load_settings()) is None
