"""The stream host's SSH gate: each session may run ``streamwarden launch`` or ``streamwarden halt``, nothing
else, in the environment the host was started with.

The SSH server runs the gate for every session (``ForceCommand``, or ``command=`` in ``authorized_keys`` on a
host whose own sshd is used): the command the warden sent is in ``SSH_ORIGINAL_COMMAND``. A stolen warden key
then starts or stops the stream, and opens no shell.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path

from streamwarden.warden.launcher import venv_bin

ALLOWED = ("launch", "halt")
EXIT_REFUSED = 126
SESSION_VARIABLES = ("SSH_CONNECTION", "SSH_CLIENT", "HOME", "USER", "LOGNAME")
"""What a session keeps of its own environment: who connected (recorded with each launch) and who it is."""


def allowed_argv(original: str | None) -> list[str] | None:
    """The streamwarden argv a session asked for (without the program), or ``None`` when it is not allowed."""
    try:
        argv = shlex.split(original or "")
    except ValueError:
        return None
    if len(argv) < 2 or argv[0] != "streamwarden" or argv[1] not in ALLOWED:
        return None
    return argv[1:]


def session_env(env_file: Path, own: Mapping[str, str]) -> dict[str, str]:
    """The host's environment (the file the host wrote at its start) and the session's own variables."""
    env: dict[str, str] = json.loads(env_file.read_text())
    env.update({name: own[name] for name in SESSION_VARIABLES if name in own})
    return env


def run_session(env_file: Path) -> int:
    """Replace this process with the allowed command; exit 126 naming what was refused."""
    argv = allowed_argv(os.environ.get("SSH_ORIGINAL_COMMAND"))
    if argv is None:
        asked = os.environ.get("SSH_ORIGINAL_COMMAND") or "an interactive shell"
        print(f"stream host: refused {asked!r}; a session may run only "
              f"{' or '.join(f'streamwarden {name}' for name in ALLOWED)}", file=sys.stderr)
        return EXIT_REFUSED
    program = str(venv_bin() / "streamwarden")
    os.execve(program, [program, *argv], session_env(env_file, os.environ))
