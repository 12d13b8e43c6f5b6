"""The processes the long run starts: `streamwarden up` on a home of its own, and the CPU burn beside it.

Both run in sessions of their own, so a Ctrl-C in the terminal reaches the long run only, which then stops
`up` the way a person would (SIGINT) and the burn after it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import psutil

from streamwarden.warden.launcher import repo_root, venv_bin

BURN_CODE = "while True: pass"
"""One busy Python loop: one core's worth of CPU taken from the platform for the whole run."""


def up_environment(home: Path, settings: Mapping[str, str] | None = None) -> dict[str, str]:
    """This environment with the platform's home set and no Airflow variable (``up`` configures Airflow itself,
    and a developer's ``AIRFLOW_HOME`` must not leak in). Other ``STREAMWARDEN_*`` settings pass on, as they
    would to ``make run``; ``settings`` (the soak's) over them."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("AIRFLOW")}
    env.update(settings or {})
    env["STREAMWARDEN_HOME"] = str(home)
    return env


def up_command(api_port: int, producer_rate: float | None) -> list[str]:
    """`up` headless on ``api_port``; with the demo producer at ``producer_rate``, or none when it is None. No warm
    standby: the long run and the soak judge the warden's own restarts, and tell a driver by its command line,
    which a standby that took over still shows as a standby's."""
    command = [str(venv_bin() / "streamwarden"), "up", "--headless", "--api-port", str(api_port), "--standby", "off"]
    return [*command, "--no-producer"] if producer_rate is None else [*command, "--producer-rate", f"{producer_rate:g}"]


def start_up(home: Path, api_port: int, producer_rate: float | None, log_path: Path,
             settings: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
    """`streamwarden up --headless` from the checkout, its output to ``log_path``."""
    with open(log_path, "ab") as log:
        return subprocess.Popen(up_command(api_port, producer_rate), cwd=repo_root(),
                                env=up_environment(home, settings), stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)


def stop_up(up: subprocess.Popen[bytes], timeout: float) -> tuple[int, bool]:
    """SIGINT (Ctrl-C), then wait up to ``timeout`` s for `up` to drain the stream and stop everything; past it,
    SIGKILL for `up` and every descendant. ``(exit code, killed)``."""
    if up.poll() is None:
        up.send_signal(signal.SIGINT)
    try:
        return up.wait(timeout), False
    except subprocess.TimeoutExpired:
        with contextlib.suppress(psutil.NoSuchProcess):
            kill_all(psutil.Process(up.pid).children(recursive=True))
        up.kill()
        return up.wait(), True


def kill_all(processes: list[psutil.Process]) -> None:
    """SIGKILL each process (gone already is fine) and wait for them."""
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    psutil.wait_procs(processes, timeout=10)


class CpuBurn:
    """``cores`` busy loops, one process each, until :meth:`stop`."""

    def __init__(self, cores: int) -> None:
        self.processes = [subprocess.Popen([sys.executable, "-c", BURN_CODE], stdin=subprocess.DEVNULL,
                                           start_new_session=True) for _ in range(cores)]

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.wait()
