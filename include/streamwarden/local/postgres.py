"""A PostgreSQL server for the production rehearsal: Debian's server binaries, ``initdb`` into a folder, loopback.

Airflow's metadata database in the rehearsal (``streamwarden up --topology cluster``), as it is in production.
The cluster is made once (``initdb`` with SCRAM passwords; the ``airflow`` role's password generated then and
kept in a file readable by its owner only) and started on a free loopback port by every ``up``; the socket
folder is the data folder, so no system folder is needed.

PostgreSQL refuses to run as root: as root, the server runs as the ``postgres`` user (Debian's package makes
it), and since the home is readable by root only, its data folder is then outside the home, in
``/var/tmp/streamwarden-postgres-<hash of the home>`` (owned by that user, mode 0700).
"""

from __future__ import annotations

import hashlib
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from streamwarden.failures import EnvironmentFailure
from streamwarden.local.broker import LOOPBACK, free_port, port_in_use
from streamwarden.processes import die_with_parent

BIN_FOLDERS = (Path("/usr/lib/postgresql"),)
"""Where Debian's ``postgresql`` package installs each version's ``bin/`` (newest used)."""
DATABASE = "airflow"
ROLE = "airflow"
SERVER_USER = "postgres"


def server_binaries() -> Path:
    """The folder of ``initdb`` and ``postgres``: on ``PATH``, else the newest Debian version's."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    versions = sorted((p for root in BIN_FOLDERS if root.is_dir() for p in root.iterdir() if (p / "bin").is_dir()),
                      key=lambda p: int(p.name) if p.name.isdigit() else 0)
    if not versions:
        raise EnvironmentFailure("the PostgreSQL server is not installed (no initdb on PATH or under "
                                 "/usr/lib/postgresql): install Debian's `postgresql` package (`make install-cluster`)")
    return versions[-1] / "bin"


@dataclass(frozen=True)
class ServerUser:
    """Who the server runs as: this user, or (as root) the ``postgres`` user."""

    uid: int
    gid: int
    name: str

    @classmethod
    def for_this_process(cls) -> ServerUser:
        if os.geteuid() != 0:
            entry = pwd.getpwuid(os.geteuid())
            return cls(entry.pw_uid, entry.pw_gid, entry.pw_name)
        try:
            entry = pwd.getpwnam(SERVER_USER)
        except KeyError:
            raise EnvironmentFailure(f"PostgreSQL refuses to run as root and there is no {SERVER_USER!r} user to "
                                     "run it as: install Debian's `postgresql` package (it makes the user)") from None
        return cls(entry.pw_uid, entry.pw_gid, entry.pw_name)

    @property
    def is_other(self) -> bool:
        return self.uid != os.geteuid()

    def become(self) -> Callable[[], None] | None:
        """What a child runs before exec to become this user (``None``: it already is)."""
        if not self.is_other:
            return None
        uid, gid = self.uid, self.gid

        def switch() -> None:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
        return switch


def data_folder(home_folder: Path, user: ServerUser) -> Path:
    """The cluster's folder: ``home_folder`` when this user runs the server, else one outside the home."""
    if not user.is_other:
        return home_folder
    digest = hashlib.sha256(str(home_folder.resolve()).encode()).hexdigest()[:12]
    return Path("/var/tmp") / f"streamwarden-postgres-{digest}"


class LocalPostgres:
    """A PostgreSQL server on ``127.0.0.1:port`` as a child process, with the ``airflow`` database."""

    def __init__(self, folder: Path, log_path: Path, death_signal: signal.Signals | None = None) -> None:
        """``folder``: the home's PostgreSQL folder (the password file; the data folder when it can be)."""
        self.folder = folder
        self.log_path = log_path
        self.death_signal = death_signal
        self.user = ServerUser.for_this_process()
        self.data = data_folder(folder / "data", self.user)
        self.password_file = folder / "airflow.password"
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """Airflow's ``sql_alchemy_conn`` (it holds the password: hand it on in the environment only)."""
        return f"postgresql+psycopg2://{ROLE}:{self.password()}@{LOOPBACK}:{self.port}/{DATABASE}"

    def password(self) -> str:
        return self.password_file.read_text().strip()

    def start(self, timeout: float = 60.0) -> LocalPostgres:
        """Make the cluster if there is none, start the server, make the database; ENVIRONMENT when it cannot."""
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        if (self.data / "PG_VERSION").is_file() and not self.password_file.is_file():
            # a cluster outside the home whose home was deleted: nobody can log in to it any more
            shutil.rmtree(self.data)
        if not (self.data / "PG_VERSION").is_file():
            self._initdb()
        self.port = self.port or free_port()
        if port_in_use(LOOPBACK, self.port):
            raise EnvironmentFailure(f"port {self.port} on {LOOPBACK} is taken: PostgreSQL cannot listen there")
        log = open(self.log_path, "ab")  # noqa: SIM115
        self.process = subprocess.Popen(
            [str(server_binaries() / "postgres"), "-D", str(self.data), "-p", str(self.port),
             "-c", f"listen_addresses={LOOPBACK}", "-c", f"unix_socket_directories={self.data}",
             "-c", "max_connections=200"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=self._preexec(),  # noqa: PLW1509
        )
        log.close()
        self._wait_ready(timeout)
        self._ensure_database()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """A fast shutdown (SIGINT: open sessions end, nothing is lost), then SIGKILL after ``timeout``."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def _preexec(self) -> Callable[[], None] | None:
        become = self.user.become()
        arm = die_with_parent(self.death_signal) if self.death_signal else None
        if become is None or arm is None:
            return become or arm

        def both() -> None:
            arm()
            become()
        return both

    def _initdb(self) -> None:
        """A new cluster whose superuser is ``airflow``, with SCRAM passwords on every connection."""
        if not self.password_file.is_file():
            self.password_file.touch(mode=0o600)
            self.password_file.write_text(secrets.token_urlsafe(24))
        self.data.mkdir(mode=0o700, parents=True, exist_ok=True)
        pwfile = self.data.parent / f".{self.data.name}.pwfile" if self.user.is_other else \
            self.folder / ".pwfile"
        pwfile.touch(mode=0o600)
        pwfile.write_text(self.password())
        try:
            if self.user.is_other:
                for path in (self.data, pwfile):
                    os.chown(path, self.user.uid, self.user.gid)
            done = subprocess.run(
                [str(server_binaries() / "initdb"), "-D", str(self.data), "-U", ROLE, "--auth=scram-sha-256",
                 f"--pwfile={pwfile}", "--encoding=UTF8", "--locale=C.UTF-8"],
                capture_output=True, text=True, preexec_fn=self.user.become(), check=False)
        finally:
            pwfile.unlink(missing_ok=True)
        if done.returncode != 0:
            shutil.rmtree(self.data, ignore_errors=True)
            raise EnvironmentFailure(f"initdb failed (exit {done.returncode}): {done.stderr.strip()[-800:]}")

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not port_in_use(LOOPBACK, self.port):
            if self.process is not None and self.process.poll() is not None:
                raise EnvironmentFailure(f"PostgreSQL exited with code {self.process.returncode} on start; "
                                         f"see {self.log_path}")
            if time.monotonic() > deadline:
                self.stop()
                raise EnvironmentFailure(f"PostgreSQL did not listen on {LOOPBACK}:{self.port} in {timeout:.0f}s")
            time.sleep(0.1)

    def _ensure_database(self) -> None:
        import psycopg2

        deadline = time.monotonic() + 30
        while True:
            try:
                connection = psycopg2.connect(host=LOOPBACK, port=self.port, user=ROLE, password=self.password(),
                                              dbname="postgres", connect_timeout=5)
                break
            except psycopg2.OperationalError:  # listening, but still starting up
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        try:
            connection.autocommit = True
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,))
                if cursor.fetchone() is None:
                    cursor.execute(f"CREATE DATABASE {DATABASE}")
        finally:
            connection.close()
