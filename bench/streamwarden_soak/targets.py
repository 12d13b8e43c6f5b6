"""Where the faults land: the platform's processes found by role under `up`, and Airflow's REST API signed in.

A process is told by its command line (:mod:`streamwarden_longrun.roles`), the stream by its checkpoint lease,
a task by the task instance id in its title; Airflow components the soak started again after killing them are
its own children, not `up`'s, and are searched too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psutil
from streamwarden_longrun.census import TASK_TITLE
from streamwarden_longrun.dag_runs import DagRunWatch
from streamwarden_longrun.roles import classify

from streamwarden.runfiles.lease import read_holder
from streamwarden.settings import Settings
from streamwarden.warden.launcher import venv_bin


class TargetMissingError(RuntimeError):
    """The process a fault aims at is not there (not started yet, or between restarts)."""


@dataclass
class Platform:
    """`up`'s process tree, the soak's restarted components, and the API."""

    up_pid: int
    settings: Settings
    api_watch: DagRunWatch
    logs: Path
    roots: Callable[[], list[int]] = list  # the platform's processes outside `up`'s tree
    restarted: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def members(self) -> list[psutil.Process]:
        found: list[psutil.Process] = []
        for root_pid in [self.up_pid, *self.roots()]:
            with contextlib.suppress(psutil.NoSuchProcess):
                root = psutil.Process(root_pid)
                found += [root, *root.children(recursive=True)]
        return found

    def by_role(self, role: str) -> list[psutil.Process]:
        matched = []
        for process in self.members():
            with contextlib.suppress(psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
                if process.status() != psutil.STATUS_ZOMBIE and classify(" ".join(process.cmdline())) == role:
                    matched.append(process)
        return matched

    def one(self, role: str) -> psutil.Process:
        """The oldest process of ``role`` (a component's main process, not the children it forked)."""
        matched = self.by_role(role)
        if not matched:
            raise TargetMissingError(f"no {role} process is running")
        return min(matched, key=lambda process: process.create_time())

    def stream_pid(self) -> int:
        holder = read_holder(self.settings.lease_path)
        if holder is None or not holder.is_alive():
            raise TargetMissingError("no stream holds the checkpoint lease")
        return holder.pid

    def stream_group(self) -> int:
        """The stream's process group: it runs in a session of its own, so its group is never `up`'s or ours."""
        group = os.getpgid(self.stream_pid())
        if group in (os.getpgid(0), os.getpgid(self.up_pid)):
            raise TargetMissingError(f"the stream shares process group {group} with the platform: not signalled")
        return group

    def task_process(self, ti_id: str) -> psutil.Process | None:
        for process in self.members():
            with contextlib.suppress(psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
                match = TASK_TITLE.search(" ".join(process.cmdline()))
                if match is not None and match.group(1) == ti_id:
                    return process
        return None

    def restart_like(self, process_info: dict[str, Any], name: str) -> subprocess.Popen[bytes]:
        """Start ``airflow <component>`` again with the killed process's environment and folder."""
        log = open(self.logs / f"{name}-restarted.log", "ab")  # noqa: SIM115 - the child keeps it open
        started = subprocess.Popen(process_info["command"], env=process_info["environ"], cwd=process_info["cwd"],
                                   stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        log.close()
        self.restarted.append(started)
        return started

    def stop_restarted(self) -> None:
        """SIGTERM to the components the soak started again (Airflow stops on it), SIGKILL after 60 s."""
        for process in self.restarted:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 60
        for process in self.restarted:
            try:
                process.wait(max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(psutil.NoSuchProcess):
                    for child in psutil.Process(process.pid).children(recursive=True):
                        child.kill()
                process.kill()
                process.wait()

    # --- the API ---------------------------------------------------------------------------------------
    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        if not self.api_watch.ready():
            raise TargetMissingError("Airflow's API does not answer yet")
        return self.api_watch.api.call(method, path, body)

    def trigger(self, dag_id: str, conf: dict[str, Any], note: str) -> str:
        status, document = self.call("POST", f"/api/v2/dags/{dag_id}/dagRuns",
                                     {"logical_date": None, "conf": conf, "note": note})
        if status not in (200, 201) or not isinstance(document, dict):
            raise TargetMissingError(f"triggering {dag_id} failed (HTTP {status}): {str(document)[:300]}")
        return str(document["dag_run_id"])

    def run_state(self, dag_id: str, run_id: str) -> str | None:
        status, document = self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}")
        return str(document.get("state")) if status == 200 and isinstance(document, dict) else None

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        status, document = self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/taskInstances")
        if status != 200 or not isinstance(document, dict):
            return []
        return list(document.get("task_instances", []))


def process_info(process: psutil.Process, component: str) -> dict[str, Any]:
    """What it takes to start an Airflow component again: its command, environment and folder (read before the
    kill: Airflow retitles its processes, so the command is rebuilt, not read)."""
    return {"command": [str(venv_bin() / "airflow"), component], "environ": process.environ(), "cwd": process.cwd()}
