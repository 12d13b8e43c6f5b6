"""Which code a run measures: the checkout's commit and its uncommitted changes, and earlier commits' trees."""

from __future__ import annotations

import io
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MEASURED = ("include", "jobs")
"""The folders whose code the job runs: a change there that is not committed makes a run hard to repeat."""


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True).stdout.strip()


def state() -> dict[str, object]:
    """The checkout's commit and the files under :data:`MEASURED` that differ from it."""
    changed = git("status", "--porcelain", "--", *MEASURED).splitlines()
    return {"commit": git("rev-parse", "HEAD"), "uncommitted": [line.split(maxsplit=1)[1] for line in changed]}


@dataclass(frozen=True)
class Checkout:
    """An earlier commit's tree, extracted."""

    ref: str
    commit: str
    subject: str
    root: Path


def checkout(ref: str, into: Path) -> Checkout:
    """``ref``'s tree under ``into`` (``git archive``: no worktree to register or remove; extracted once)."""
    commit = git("rev-parse", "--verify", f"{ref}^{{commit}}")
    root = into / f"ref-{commit[:12]}"
    if not root.exists():
        archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", commit], capture_output=True,
                                 check=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(root, filter="data")
    return Checkout(ref, commit, git("log", "-1", "--format=%s", commit), root)
