"""The single-instance lease: a second holder is refused, a dead holder's lease is taken over."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streamwarden.runfiles.lease import CheckpointLease, LeaseHeldError, is_held, read_holder

HOLD = "import sys, time; from streamwarden.runfiles.lease import CheckpointLease; from pathlib import Path; " \
       "lease = CheckpointLease(Path(sys.argv[1]), Path('ckpt')); lease.acquire(); print('held', flush=True); " \
       "time.sleep(60)"


def test_second_holder_is_refused_and_dead_holder_is_taken_over(tmp_path: Path) -> None:
    path = tmp_path / "q.lease"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert is_held(path)
        with pytest.raises(LeaseHeldError, match=f"pid {holder.pid}"):
            CheckpointLease(path, tmp_path).acquire()
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    deadline = time.monotonic() + 5
    while is_held(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    with CheckpointLease(path, tmp_path) as mine:
        assert mine.pid == os.getpid()
        assert read_holder(path) == mine
    assert not is_held(path)
