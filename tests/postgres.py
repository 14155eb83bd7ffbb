"""A throwaway PostgreSQL server for the tests: Debian's binaries, a temp folder, a unix socket, no TCP.

The server cannot run as root, so when the tests run as root (CI does) every server command runs as the
``postgres`` user through ``runuser`` and the folder is handed to that user. The server listens on a socket
in its own folder only (``listen_addresses=''``) and runs with ``fsync=off``: it holds test data that dies
with it. Each pytest-xdist worker starts its own server (the fixture is session-scoped, and a session is per
worker), and every test gets a fresh database on it, so nothing is shared between tests or workers.

Binaries: ``TILELENS_TEST_PG_BIN`` (a folder with ``initdb``, ``pg_ctl``), else the newest
``/usr/lib/postgresql/<version>/bin``, else ``initdb`` on ``PATH``.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import quote

ENV_BIN = "TILELENS_TEST_PG_BIN"
SUPERUSER = "postgres"
# A role that must give a password (scram), for the wrong-password tests; every other role is trusted.
PASSWORD_ROLE = "tl_password"
PASSWORD = "right-password"


def find_bindir() -> Path | None:
    """The folder of ``initdb`` and ``pg_ctl``, or None when PostgreSQL's server is not installed."""
    given = os.environ.get(ENV_BIN)
    if given:
        return Path(given) if (Path(given) / "initdb").is_file() else None
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: [int(x) if x.isdigit() else 0 for x in p.parent.parent.name.split(".")],
    )
    if versions:
        return versions[-1].parent
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def missing_reason() -> str | None:
    """Why PostgreSQL tests cannot run here, or None when they can."""
    if find_bindir() is None:
        return (
            "PostgreSQL server binaries not found (apt-get install postgresql, or set "
            f"{ENV_BIN} to the folder holding initdb)"
        )
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "the psycopg driver is not installed (pip install -e '.[postgres]')"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser: the PostgreSQL server cannot be started as 'postgres'"
    return None


class PostgresServer:
    """One server in a temp folder; :meth:`start` it, :meth:`create_database` per test, :meth:`stop` it."""

    def __init__(self, bindir: Path, durable: bool = False) -> None:
        self.bindir = bindir
        self.durable = durable  # fsync as a real server does (benchmarks); tests skip it
        self.root = Path(tempfile.mkdtemp(prefix="tl-pg-"))  # short: a socket path has ~100 bytes
        self.data = self.root / "data"
        self._names = itertools.count()
        self.started = False

    # -- running server commands as the postgres user -------------------------------------------------------

    def _as_owner(self, *argv: object) -> list[str]:
        cmd = [str(a) for a in argv]
        return ["runuser", "-u", SUPERUSER, "--", *cmd] if os.geteuid() == 0 else cmd

    def _run(self, *argv: object) -> None:
        proc = subprocess.run(self._as_owner(*argv), capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout}")

    def start(self) -> None:
        if os.geteuid() == 0:
            shutil.chown(self.root, user=SUPERUSER)
        self._run(
            self.bindir / "initdb", "-D", self.data, "-A", "trust", "-U", SUPERUSER, "--no-sync",
            "-E", "UTF8", "--locale=C",
        )  # fmt: skip
        hba = self.data / "pg_hba.conf"
        rules = f"local all {PASSWORD_ROLE} scram-sha-256\n"  # first match wins: before the trust lines
        hba.write_text(rules + hba.read_text())
        options = f"-k {self.root} -c listen_addresses='' -c max_connections=300"
        if not self.durable:
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        self._run(self.bindir / "pg_ctl", "-D", self.data, "-l", self.root / "log", "-o", options, "-w",
                  "-t", "60", "start")  # fmt: skip
        self.started = True
        self.execute(f"CREATE ROLE {PASSWORD_ROLE} LOGIN SUPERUSER PASSWORD '{PASSWORD}'")

    def stop(self) -> None:
        try:
            if self.started:
                self._run(self.bindir / "pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop")
                self.started = False
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    # -- databases ------------------------------------------------------------------------------------------

    @property
    def socket_dir(self) -> Path:
        return self.root

    def url(self, database: str, user: str = SUPERUSER, password: str | None = None) -> str:
        """A SQLAlchemy URL that reaches ``database`` over this server's socket."""
        auth = quote(user, safe="") + (f":{quote(password, safe='')}" if password is not None else "")
        return f"postgresql+psycopg://{auth}@/{database}?host={self.root}"

    def execute(self, sql: str, database: str = "postgres") -> None:
        import psycopg

        with psycopg.connect(host=str(self.root), user=SUPERUSER, dbname=database, autocommit=True) as c:
            c.execute(sql)

    def create_database(self, prefix: str = "t") -> str:
        """A new empty database; returns its name."""
        name = f"{prefix}_{os.getpid()}_{next(self._names)}"
        self.execute(f'CREATE DATABASE "{name}"')
        return name
