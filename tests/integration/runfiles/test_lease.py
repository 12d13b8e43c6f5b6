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


def test_probes_in_a_tight_loop_never_refuse_a_start(tmp_path: Path) -> None:
    path = tmp_path / "q.lease"
    path.touch()
    prober = "import sys; from pathlib import Path; from streamwarden.runfiles.lease import is_held\n" \
             "print('probing', flush=True); seen = sum(is_held(Path(sys.argv[1])) for _ in range(30000))\n" \
             "print(seen, flush=True)"
    probers = [subprocess.Popen([sys.executable, "-c", prober, str(path)], stdout=subprocess.PIPE, text=True)
               for _ in range(2)]
    starts = 0
    try:
        for p in probers:
            assert p.stdout is not None and p.stdout.readline().strip() == "probing"
        while any(p.poll() is None for p in probers):  # every start meets the probers' locks and waits them out
            with CheckpointLease(path, tmp_path):
                starts += 1
    finally:
        outputs = [p.communicate(timeout=120)[0] for p in probers]
    assert starts > 100 and all(0 < int(out) < 30000 for out in outputs)  # the probers saw the starts, and gaps
