"""The embedded broker of ``streamwarden up`` dies with it: a kill -9 of its parent leaves no broker holding
every record in memory until the next ``up``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import psutil

_PARENT = """
import signal, sys, time
from streamwarden.local.broker import LocalBroker
broker = LocalBroker(death_signal=signal.SIGTERM).start()
print(broker.process.pid, flush=True)
time.sleep(600)
"""


def test_a_broker_started_with_a_death_signal_stops_when_its_parent_is_killed() -> None:
    parent = subprocess.Popen([sys.executable, "-c", _PARENT], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    broker = psutil.Process(int(parent.stdout.readline()))
    try:
        assert broker.is_running()
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        gone, _ = psutil.wait_procs([broker], timeout=15)  # Tansu takes ~3 s to exit on SIGTERM
        assert gone == [broker]
    finally:
        parent.kill()
        if broker.is_running():
            broker.kill()
