"""A real PostgreSQL 15 server for the tests, started by the test session itself.

:class:`PostgresServer` runs ``initdb`` and then ``postgres`` (the server binary itself, as a
child process, so it is stopped by its own PID) in a temporary directory, on a free port,
with ``fsync=off`` (a test database needs no durability across power loss; a SIGKILLed
*client* is what the tests probe). As root, ``initdb`` refuses to run, so both run as the
``postgres`` user; otherwise as the current user. About a second to start. An outage is
:meth:`PostgresServer.halt` (stopped by its PID, data kept) and :meth:`PostgresServer.restart`
(the same databases back on the same port); a test that halts its server starts its own.

Fixtures (import them into a test module: ``from postgres_support import postgres_server,
postgres_url``):

- ``postgres_server``: the session's one server (started on first use; shared by every module
  that imports the fixture; stopped at the end of the session);
- ``postgres_url``: a fresh, empty database on it for each test, as a ``postgresql://`` URL.

When the binaries are missing the tests are skipped with a message saying how to install them,
or fail with that message when the environment variable ``CI`` is set (CI must not pass by
skipping).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from guarantee_support import port_open, wait_until

from algenta_graph._net import free_port

INSTALL_HINT = (
    "PostgreSQL 15 server binaries not found (looked at `pg_config --bindir` and "
    "/usr/lib/postgresql/*/bin). Install them: `apt-get install postgresql-15` "
    "(Debian/Ubuntu; `pg_config` comes with `libpq-dev` or `postgresql-server-dev-15`), "
    "or set ALGENTA_PG_BINDIR to the directory that holds initdb and postgres."
)
SUPERUSER = "algenta"


def find_bindir() -> Path | None:
    """The directory holding ``initdb`` and ``postgres``, or ``None``."""
    candidates: list[Path] = []
    if os.environ.get("ALGENTA_PG_BINDIR"):
        candidates.append(Path(os.environ["ALGENTA_PG_BINDIR"]))
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True
            )
            candidates.append(Path(out.stdout.strip()))
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
    for path in candidates:
        if (path / "initdb").is_file() and (path / "postgres").is_file():
            return path
    return None


def require_bindir() -> Path:
    """The binaries' directory; otherwise skip (or fail, when ``CI`` is set) with the hint."""
    bindir = find_bindir()
    if bindir is None:
        if os.environ.get("CI"):
            pytest.fail(INSTALL_HINT, pytrace=False)
        pytest.skip(INSTALL_HINT)
    return bindir


class PostgresServer:
    """One PostgreSQL server in a temporary directory; ``with`` starts it and stops it."""

    def __init__(self, bindir: Path, *, port: int | None = None, durable: bool = False) -> None:
        """``durable=True`` keeps PostgreSQL's own defaults (``fsync``, ``synchronous_commit``,
        ``full_page_writes`` on): what a benchmark against a flushed SQLite file needs."""
        self.bindir = bindir
        self.durable = durable
        self.port = port or free_port()
        self.host = "127.0.0.1"
        self.proc: subprocess.Popen[bytes] | None = None
        self._root = Path(tempfile.mkdtemp(prefix="algenta-pg-"))
        self.datadir = self._root / "data"
        self.log_path = self._root / "postgres.log"
        self._run_as: dict[str, Any] = {}
        if os.geteuid() == 0:  # initdb refuses root: run the server as the postgres user
            user = pwd.getpwnam("postgres")
            os.chown(self._root, user.pw_uid, user.pw_gid)
            self._run_as = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
        self._env = {**os.environ, "LC_ALL": "C", "TZ": "UTC"}

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@{self.host}:{self.port}/{database}"

    def start(self) -> PostgresServer:
        subprocess.run(
            [
                str(self.bindir / "initdb"),
                "-D",
                str(self.datadir),
                "-U",
                SUPERUSER,
                "--auth=trust",
                "--no-sync",
                "--encoding=UTF8",
                "--locale=C",
            ],
            check=True,
            capture_output=True,
            env=self._env,
            cwd=self._root,
            **self._run_as,
        )
        return self._launch()

    def _launch(self) -> PostgresServer:
        """Start the server binary on the data directory and wait until it accepts connections."""
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child, closed below
        start_at = self.log_path.stat().st_size if self.log_path.exists() else 0
        try:
            self.proc = subprocess.Popen(
                [
                    str(self.bindir / "postgres"),
                    "-D",
                    str(self.datadir),
                    "-p",
                    str(self.port),
                    "-c",
                    f"listen_addresses={self.host}",
                    "-c",
                    f"unix_socket_directories={self._root}",
                    *self._speed_settings(),
                    "-c",
                    "max_connections=300",
                    "-c",
                    "shared_buffers=64MB",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self._env,
                cwd=self._root,
                **self._run_as,
            )
        finally:
            log.close()
        proc = self.proc

        def ready() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"postgres exited with {proc.returncode}: "
                    + self.log_path.read_text(errors="replace")[-2000:]
                )
            with self.log_path.open("rb") as f:  # this start's lines only (see restart)
                f.seek(start_at)
                logged = f.read().decode(errors="replace")
            return port_open(self.port) and "ready to accept connections" in logged

        wait_until(ready, timeout=60, interval=0.05, what=f"PostgreSQL on port {self.port}")
        return self

    def halt(self) -> None:
        """An outage: stop the server by its PID (immediate shutdown, SIGQUIT), keeping its data
        directory, so :meth:`restart` brings the same databases back on the same port."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGQUIT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)

    def restart(self) -> PostgresServer:
        """Start the server again after :meth:`halt` (same data, same port)."""
        if self.proc is not None:
            raise RuntimeError("the server is running")
        return self._launch()

    def _speed_settings(self) -> list[str]:
        if self.durable:
            return []
        return [
            "-c",
            "fsync=off",
            "-c",
            "synchronous_commit=off",
            "-c",
            "full_page_writes=off",
        ]

    def create_database(self, name: str | None = None) -> str:
        """A new empty database; returns its URL."""
        import psycopg

        name = name or f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        """Immediate shutdown (SIGQUIT to the postmaster's PID: its data is thrown away, so no
        shutdown checkpoint is written); SIGKILL if it does not go; then the directory goes."""
        self.halt()
        shutil.rmtree(self._root, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


# one server per session, however many modules import the fixture
_shared: PostgresServer | None = None
_users = 0
_lock = threading.Lock()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    global _shared, _users
    bindir = require_bindir()
    with _lock:
        if _shared is None:
            _shared = PostgresServer(bindir).__enter__()
        _users += 1
        server = _shared
    try:
        yield server
    finally:
        with _lock:
            _users -= 1
            if _users == 0 and _shared is not None:
                _shared.stop()
                _shared = None


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """A fresh, empty database for this test."""
    return postgres_server.create_database()
