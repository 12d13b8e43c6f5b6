"""The stream host's SSH server: OpenSSH's ``sshd`` on one address, the warden's key the only way in, and every
session through the gate (:mod:`.gate`).

``streamwarden stream-host`` writes the server's configuration and the sessions' environment into its folder,
then becomes ``sshd -D``. The rehearsal (``up --topology cluster``) and the compose file's ``stream-host`` service
run that same command.
"""

from __future__ import annotations

import json
import os
import pwd
import shlex
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from streamwarden.failures import ConfigError, EnvironmentFailure
from streamwarden.settings_loading import ENV_PREFIX
from streamwarden.warden.launcher import venv_bin, without_file_secrets

HOST_VARIABLES = ("JAVA_HOME", "PATH", "LANG", "LC_ALL", "TZ")
"""What the sessions get of the host's environment beside ``STREAMWARDEN_*``, ``SPARK_*`` and ``PYSPARK_*``."""
PRIVILEGE_SEPARATION = Path("/run/sshd")
"""Where a root sshd confines its pre-authentication child (Debian's build); made when missing."""


@dataclass(frozen=True)
class StreamHostFiles:
    """The stream host's folder: the server's configuration, the sessions' environment, its pid file."""

    root: Path

    @property
    def config(self) -> Path:
        return self.root / "sshd_config"

    @property
    def env_file(self) -> Path:
        return self.root / "session-env.json"

    @property
    def pid_file(self) -> Path:
        return self.root / "sshd.pid"


@dataclass(frozen=True)
class ServerSpec:
    """Where the server listens, its host key, the keys that may log in, and as whom."""

    listen: str
    port: int
    host_key: Path
    authorized_keys: Path
    login: str


def sshd_binary() -> str:
    found = shutil.which("sshd") or ("/usr/sbin/sshd" if Path("/usr/sbin/sshd").is_file() else None)
    if found is None:
        raise EnvironmentFailure("no sshd: install OpenSSH's server (Debian: openssh-server; `make install-cluster`)")
    return found


def make_key(path: Path) -> str:
    """An ed25519 key pair at ``path`` and ``path.pub`` (made once); the public key's ``type base64`` text."""
    if not path.is_file():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f", str(path)],
                       check=True, capture_output=True)
    return " ".join(Path(f"{path}.pub").read_text().split()[:2])


def session_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """What every session runs with: the host's settings (secret ones only through the config file it names),
    Spark's and Java's variables, and this environment's scripts first on ``PATH``."""
    env = {k: v for k, v in environ.items()
           if k.startswith((ENV_PREFIX, "SPARK_", "PYSPARK_")) or k in HOST_VARIABLES}
    env = without_file_secrets(env, environ)
    env["PATH"] = os.pathsep.join([str(venv_bin()), env.get("PATH", os.defpath)])
    return env


def sshd_config(spec: ServerSpec, files: StreamHostFiles) -> str:
    """The server's whole configuration: public key only, one user, no forwarding, no TTY, every session gated."""
    gate = shlex.join([str(venv_bin() / "streamwarden"), "stream-host-session", "--env-file", str(files.env_file)])
    return "\n".join([
        f"ListenAddress {spec.listen}",
        f"Port {spec.port}",
        f"HostKey {spec.host_key}",
        f"PidFile {files.pid_file}",
        f"AuthorizedKeysFile {spec.authorized_keys}",
        f"AllowUsers {spec.login}",
        "AuthenticationMethods publickey",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PermitRootLogin prohibit-password",
        "UsePAM no",
        # Its checks reject any key file below a world-writable folder such as /tmp, sticky or not; the keys are
        # given by path by whoever runs the host (the rehearsal's are in its home, mode 0700).
        "StrictModes no",
        "DisableForwarding yes",
        "PermitTTY no",
        "PrintMotd no",
        "Subsystem sftp internal-sftp",  # unreachable: ForceCommand runs the gate for every session
        f"ForceCommand {gate}",
        "",
    ])


def prepare(spec: ServerSpec, files: StreamHostFiles, environ: Mapping[str, str]) -> list[str]:
    """Write the configuration and the sessions' environment (the login user's only); the sshd command."""
    user = _login_user(spec.login)
    for path, what in ((spec.host_key, "host key"), (spec.authorized_keys, "authorized keys")):
        if not path.is_file():
            raise ConfigError(f"the stream host's {what} {path} does not exist")
    files.root.mkdir(mode=0o700, parents=True, exist_ok=True)
    files.env_file.touch(mode=0o600)
    files.env_file.write_text(json.dumps(session_environment(environ), sort_keys=True))
    if os.getuid() == 0:
        os.chown(files.env_file, user.pw_uid, user.pw_gid)
        PRIVILEGE_SEPARATION.mkdir(mode=0o755, exist_ok=True)
    files.config.write_text(sshd_config(spec, files))
    binary = sshd_binary()
    check = subprocess.run([binary, "-t", "-f", str(files.config)], check=False, capture_output=True, text=True)
    if check.returncode != 0:
        raise ConfigError(f"sshd refuses {files.config}: {check.stderr.strip()}")
    return [binary, "-D", "-e", "-f", str(files.config)]


def serve(spec: ServerSpec, files: StreamHostFiles) -> NoReturn:
    """Become the stream host's SSH server (in the foreground, its log on stderr)."""
    command = prepare(spec, files, os.environ)
    print(f"stream host: sshd on {spec.listen}:{spec.port} for {spec.login}, keys {spec.authorized_keys}; "
          f"sessions may run streamwarden launch or halt only", flush=True)
    os.execv(command[0], command)


def _login_user(login: str) -> pwd.struct_passwd:
    try:
        user = pwd.getpwnam(login)
    except KeyError:
        raise ConfigError(f"the stream host's login {login!r} is no user here") from None
    if os.getuid() not in (0, user.pw_uid):
        raise ConfigError(f"an sshd run by uid {os.getuid()} lets only its own user log in, not {login!r}")
    return user
