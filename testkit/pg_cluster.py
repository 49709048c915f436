"""A private PostgreSQL cluster for the tests: ``initdb`` + ``pg_ctl`` in a temporary
folder, as an unprivileged user, removed afterwards.  No mocks of PostgreSQL.

PostgreSQL refuses to run as root, and CI runs as root: then the cluster's folder is
given to ``nobody`` and the server commands run under ``setpriv`` as that user.  The
server listens on a Unix socket in its own folder and on 127.0.0.1 at a free port, with
``trust`` authentication for its one role, so nothing outside the test can reach it.
Each test gets a database of its own, dropped after it: an empty one (``CREATE DATABASE``
from ``template0``) for tests of the migrations, else a copy of a database migrated once
for the session (``TEMPLATE``), which costs a file copy instead of fifteen migrations.  The
cluster lives for the test session (one per pytest-xdist worker).
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROLE = "pigeond_test"
START_TIMEOUT_S = 30


def postgres_bin() -> Path | None:
    """The folder of Debian's PostgreSQL server programs (newest version), or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_version)
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return None if initdb is None else Path(initdb).resolve().parent


def _version(path: str) -> int:
    part = Path(path).parent.parent.name
    return int(part) if part.isdigit() else 0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PgCluster:
    """One running cluster: where it is, how to reach it, and the databases made in it."""

    root: Path
    port: int
    bin: Path
    _as_user: list[str]
    _names: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    @property
    def socket_dir(self) -> Path:
        return self.root / "sock"

    def url(self, database: str = "postgres", *, tcp: bool = False, role: str = ROLE) -> str:
        """A libpq URL of ``database`` as ``role``: over the Unix socket, or over 127.0.0.1."""
        if tcp:
            return f"postgresql://{role}@127.0.0.1:{self.port}/{database}"
        return f"postgresql://{role}@/{database}?host={self.socket_dir}&port={self.port}"

    def require_password(self, role: str, password: str) -> None:
        """A superuser ``role`` that must give ``password`` (SCRAM) to connect, however it
        comes; every other role is still trusted.  Idempotent."""
        if self.psql(f"SELECT 1 FROM pg_roles WHERE rolname = '{role}'").strip():
            return
        self.psql(f"CREATE ROLE {role} LOGIN SUPERUSER PASSWORD '{password}'")
        hba = self.root / "data" / "pg_hba.conf"
        rules = f"local all {role} scram-sha-256\nhost all {role} 127.0.0.1/32 scram-sha-256\n"
        hba.write_text(rules + hba.read_text())  # the first rule that matches applies
        self.pg_ctl("reload")

    def psql(self, sql: str, database: str = "postgres") -> str:
        """Run ``sql`` with psql as the cluster's role; its output."""
        done = subprocess.run(
            [str(self.bin / "psql"), "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1",
             "-d", self.url(database), "-c", sql],
            capture_output=True, text=True, timeout=START_TIMEOUT_S, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"psql failed: {done.stderr.strip()}")
        return done.stdout

    def create_database(self, template: str = "template0") -> str:
        """A new database copied from ``template`` (by default empty); its name."""
        name = f"t{os.getpid()}_{next(self._names)}"
        self.psql(f"CREATE DATABASE {name} TEMPLATE {template}")
        return name

    def drop_database(self, name: str) -> None:
        self.psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def pg_ctl(self, *args: str) -> None:
        """Run ``pg_ctl`` on the cluster (``stop``, ``start``, ``restart`` ...)."""
        command = [str(self.bin / "pg_ctl"), "-D", str(self.root / "data"), "-w",
                   "-t", str(START_TIMEOUT_S), *args]  # fmt: skip
        if args and args[0] in ("start", "restart"):
            command += ["-l", str(self.root / "server.log"), "-o", self._server_options()]
        subprocess.run(
            [*self._as_user, *command], check=True, capture_output=True,
            timeout=START_TIMEOUT_S + 5,
        )  # fmt: skip

    def _server_options(self) -> str:
        return (
            f"-p {self.port} -k {self.socket_dir} -c listen_addresses=127.0.0.1"
            " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
            " -c max_connections=200 -c shared_buffers=32MB"
        )


def _as_unprivileged(root: Path) -> list[str]:
    """The command prefix that runs the server commands as an unprivileged user (when we
    are root), after handing it the cluster's folder; nothing otherwise."""
    if os.geteuid() != 0:
        return []
    nobody = pwd.getpwnam("nobody")
    for path in [root, *root.rglob("*")]:
        os.chown(path, nobody.pw_uid, nobody.pw_gid)
    return ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups"]


@contextlib.contextmanager
def running_cluster() -> Iterator[PgCluster]:
    """A cluster started in a new temporary folder, stopped and removed afterwards."""
    bin_dir = postgres_bin()
    if bin_dir is None:
        raise RuntimeError(
            "PostgreSQL's server programs are missing: `make system-deps` installs Debian's"
            " postgresql (as root)"
        )
    root = Path(tempfile.mkdtemp(prefix="pigeond-pg-"))
    root.chmod(0o755)
    (root / "sock").mkdir()
    as_user = _as_unprivileged(root)
    cluster = PgCluster(root, _free_port(), bin_dir, as_user)
    try:
        subprocess.run(
            [*as_user, str(bin_dir / "initdb"), "-D", str(root / "data"), "-U", ROLE,
             "-A", "trust", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        cluster.pg_ctl("start")
        yield cluster
    finally:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            cluster.pg_ctl("stop", "-m", "immediate")
        shutil.rmtree(root, ignore_errors=True)
