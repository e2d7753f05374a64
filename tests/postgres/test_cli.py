"""``algenta-graph`` on a PostgreSQL checkpoint store, when the store is not what was asked.

- a malformed ``--db`` URL is a bad input on every subcommand that takes ``--db`` (exit 2,
  naming ``--db``), refused before anything connects, the password never shown;
- a PostgreSQL outage in the middle of ``run`` is one line on stderr (no psycopg pool noise,
  no traceback) saying the store was lost and how to resume; once the server is back, ``run``
  without a prompt finishes the thread, and the decision the engine delivered during the
  outage is recorded exactly once.

The server is a real PostgreSQL, started by the test (``tests/support/postgres_support.py``) and
stopped by its PID mid-run; the engine is the reference engine over HTTP; ``run`` is the real
console command in a subprocess.
"""

from __future__ import annotations

import http.server
import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
from cli_support import assert_one_line_error, cli, cli_env, command
from guarantee_support import log_decision, wait_until
from mcp import ClientSession
from postgres_support import PostgresServer, require_bindir

from algenta_graph._net import free_port
from algenta_graph.engine import ReferenceEngine
from algenta_graph.serving.checkpoint_reader import read_thread_records

pytestmark = pytest.mark.timeout(300)

Session = Callable[..., AbstractAsyncContextManager[ClientSession]]


class HeldWebhook:
    """A webhook that records each POST and answers it only once :meth:`release` is called."""

    def __init__(self) -> None:
        self.bodies: list[Any] = []
        self.arrived = threading.Event()
        self._release = threading.Event()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                outer.bodies.append(json.loads(self.rfile.read(length) or b"null"))
                outer.arrived.set()
                outer._release.wait(timeout=120)
                body = b'{"ok": true}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/hook"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def release(self) -> None:
        self._release.set()

    def __enter__(self) -> HeldWebhook:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


@pytest.fixture
def own_postgres() -> Iterator[PostgresServer]:
    """A server of this test's own (it is stopped mid-test; the session's one is shared)."""
    with PostgresServer(require_bindir()) as server:
        yield server


MALFORMED = [
    ("postgresql://[::1", 'matching "]" in IPv6 host address'),
    ("postgresql://ops:hunter2@[::1/db", 'matching "]" in IPv6 host address'),
    ("postgres://ops:hunter2@db.internal:99999/agents", "'99999' is not a number"),
    ("postgresql://db.internal:five/agents", "'five' is not a number"),
    ("postgresql://%zz@db.internal/agents", 'invalid percent-encoded token: "%zz"'),
    ("postgresql://db.internal/agents?sslmod=require", 'invalid URI query parameter: "sslmod"'),
]
SUBCOMMANDS = {  # each one's arguments before and after --db
    "run": (["run", "hello"], []),
    "receipts": (["receipts"], []),
    "receipts --verify": (["receipts", "--verify"], []),
    "demo": (["demo"], []),
    # (a port argparse refuses too, after --db: the engine never starts, whatever happens)
    "engine": (["engine"], ["--port", "0"]),
}


def _refused(args: list[str], url: str, why: str, cwd: Path) -> None:
    proc = cli(*args, cwd=cwd, timeout=60)
    line = assert_one_line_error(proc, "--db", "is not a valid PostgreSQL URL", why, code=2)
    assert line.startswith(f"algenta-graph {args[0]}: error: argument --db: "), line
    assert "hunter2" not in proc.stderr + proc.stdout  # the password is never shown
    assert list(cwd.iterdir()) == []  # refused before anything was created or connected


@pytest.mark.parametrize("name", list(SUBCOMMANDS))
def test_a_malformed_postgres_url_is_a_usage_error_on_every_subcommand(
    name: str, tmp_path: Path
) -> None:
    before, after = SUBCOMMANDS[name]
    for url, why in MALFORMED[:2]:  # the one the issue names, and one with a password
        _refused([*before, "--db", url, *after], url, why, tmp_path)


def test_every_malformed_url_is_refused_saying_why(tmp_path: Path) -> None:
    for url, why in MALFORMED:
        _refused(["run", "hello", "--db", url], url, why, tmp_path)


def test_a_well_formed_url_still_reaches_the_store() -> None:
    """The check refuses only what libpq cannot parse: a URL with several hosts, an IPv6
    host or a socket directory goes on to connect (and, with nothing there, fails as an
    unreachable store, exit 1), never as a usage error."""
    port = free_port()
    for url in (
        f"postgresql://u@127.0.0.1:{port},127.0.0.1:{port}/db",
        f"postgresql://u@[::1]:{port}/db",
        f"postgresql:///db?host=/nonexistent&port={port}",
    ):
        proc = cli("receipts", "--db", url, timeout=60)
        assert_one_line_error(proc, "--db", code=1)


async def test_an_outage_mid_run_is_one_line_and_the_thread_resumes_after_it(
    own_postgres: PostgresServer, engine: ReferenceEngine, mcp_session: Session
) -> None:
    url = own_postgres.create_database()
    async with mcp_session(engine.url) as session:
        decision = await log_decision(session, action=f"pg-outage-{time.monotonic_ns()}")
    args = ["--profile", "execute", "--thread", "t", "--db", url, "--base-url", engine.url]
    with HeldWebhook() as hook:
        prompt = f"execute_decision decision_id={decision} webhook_url={hook.url}"
        proc = subprocess.Popen(
            [*command(), "run", prompt, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=cli_env(),
        )
        try:
            # the engine is delivering the decision: the graph waits on execute_decision
            wait_until(hook.arrived.is_set, timeout=120, what="the webhook POST")
            own_postgres.halt()  # the outage, mid-run
            hook.release()
            out, err = proc.communicate(timeout=240)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        failed = subprocess.CompletedProcess(proc.args, proc.returncode, out.decode(), err.decode())
        line = assert_one_line_error(failed, f"--db {url}", "PostgreSQL checkpoint store", code=1)
        assert line.startswith("algenta-graph run: error: --db ")
        assert "lost during the run" in line and f"run --thread t --db {url}" in line
        for noise in ("psycopg", "pool", "Is the server running", "error connecting"):
            assert noise not in failed.stderr, failed.stderr

        own_postgres.restart()  # the outage ends: the same databases, on the same port
        resumed = cli("run", *args, timeout=240)
        assert resumed.returncode == 0, (resumed.stdout[-2000:], resumed.stderr[-2000:])
        assert f"the receipt of {decision}" in resumed.stdout  # recovered from the engine
    # nothing lost, nothing twice: one POST, one execution, one receipt in the thread
    assert [b["decision_id"] for b in hook.bodies] == [decision]
    assert len(engine.executions(decision)) == 1
    records = await read_thread_records(url)
    assert [r["decision_id"] for r in records["t"]["receipts"]] == [decision]
    assert records["t"]["receipts"][0]["source"] == "recovered"


@pytest.mark.parametrize(
    "args", [["escalations"], ["escalations", "--expire"]], ids=["list", "expire"]
)
def test_escalations_on_an_unreachable_store_is_one_line(args: list[str]) -> None:
    """``escalations`` on a PostgreSQL store nobody serves: one line naming ``--db``, exit 1."""
    url = f"postgresql://u@127.0.0.1:{free_port()}/db"
    proc = cli(*args, "--db", url, timeout=60)
    line = assert_one_line_error(proc, f"--db {url}", code=1)
    assert line.startswith("algenta-graph escalations: error: --db "), line
    assert "Traceback" not in proc.stderr
