"""Where a governed graph keeps its checkpoints: one resolver for a path, a URL or a saver.

``open_checkpointer(spec)`` is the single place that turns what a user passes (``--db`` on the
command line, ``checkpointer=`` in Python) into a LangGraph ``BaseCheckpointSaver``:

- a ``BaseCheckpointSaver`` instance: used as it is (the caller owns its life);
- a ``postgresql://`` / ``postgres://`` URL: ``AsyncPostgresSaver`` over a
  ``psycopg_pool.AsyncConnectionPool`` (the ``algenta-graph[postgres]`` extra). The pool's
  connections use the settings the saver requires (``autocommit=True``, ``prepare_threshold=0``,
  ``row_factory=dict_row``); the saver's ``setup()`` (its tables and migrations) runs once on
  open, under a PostgreSQL advisory lock so that many workers starting at once do not race it;
  the pool is closed on exit. Many processes on many machines may share one database: each
  thread's checkpoints are keyed by its ``thread_id``.
- anything else: a SQLite file path (``AsyncSqliteSaver``), for one machine.

Example::

    async with open_checkpointer("postgresql://app@db.internal/agents") as saver:
        graph = await create_governed_agent(profile="execute", checkpointer=saver)

Reading checkpoints back is :mod:`algenta_graph.serving.checkpoint_reader`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from langgraph.checkpoint.base import BaseCheckpointSaver

from algenta_graph.errors import CheckpointerError, CheckpointerURLError

__all__ = [
    "CheckpointerError",
    "CheckpointerURLError",
    "check_postgres_url",
    "is_postgres_url",
    "open_checkpointer",
    "redact_url",
    "server_checkpointer",
]

_PG_SCHEMES = ("postgresql://", "postgres://")


ENV_CHECKPOINTER = "ALGENTA_CHECKPOINTER"
"""The served graph's checkpoint store (``server_checkpointer``): a ``postgresql://`` URL."""

_SETUP_LOCK_KEY = 0x616C67656E7461  # "algenta": the advisory lock that serialises setup()
DEFAULT_POOL_SIZE = 10
CONNECT_TIMEOUT_SECONDS = 10
SETUP_LOCK_TIMEOUT_SECONDS = 120


def is_postgres_url(spec: object) -> bool:
    """Whether ``spec`` names a PostgreSQL database rather than a SQLite file.

    >>> is_postgres_url("postgresql://u@localhost/db"), is_postgres_url("runs.sqlite")
    (True, False)
    """
    return isinstance(spec, str) and spec.strip().lower().startswith(_PG_SCHEMES)


def redact_url(url: str) -> str:
    """``postgresql://user:secret@host/db`` -> ``postgresql://user:***@host/db``.

    The query (which may hold a ``password=``) is dropped. A URL too malformed to parse is
    redacted as text, never raised on.

    >>> redact_url("postgresql://u:pw@h:5432/db?sslmode=require")
    'postgresql://u:***@h:5432/db'
    >>> redact_url("postgresql://u:pw@[::1")
    'postgresql://u:***@[::1'
    """
    try:
        parts = urlsplit(url)
    except ValueError:  # e.g. an unclosed IPv6 bracket: redact the text itself
        head, sep, rest = url.partition("://")
        rest = re.split(r"[?#]", rest, maxsplit=1)[0]
        if "@" in rest:
            user, host = rest.rsplit("@", 1)
            if ":" in user:
                user = user.split(":", 1)[0] + ":***"
            rest = f"{user}@{host}"
        return f"{head}{sep}{rest}"
    netloc = parts.netloc
    if "@" in netloc:
        user, host = netloc.rsplit("@", 1)
        if ":" in user:
            user = user.split(":", 1)[0] + ":***"
        netloc = f"{user}@{host}"
    return f"{parts.scheme}://{netloc}{parts.path}"


def check_postgres_url(url: str) -> None:
    """Raise :class:`CheckpointerURLError` unless ``url`` is a well-formed PostgreSQL URL.

    Parsed as libpq parses it (``psycopg.conninfo``, when the PostgreSQL extra is installed;
    else only the URL syntax is checked), and every port must be a number from 1 to 65535.
    Nothing connects. The error shows the URL without its password.

    >>> check_postgres_url("postgresql://u@h1:5432,h2:5433/db")
    >>> try:
    ...     check_postgres_url("postgresql://[::1")
    ... except CheckpointerURLError as exc:
    ...     print(exc)  # doctest: +ELLIPSIS
    postgresql://[::1 is not a valid PostgreSQL URL: end of string reached when looking for ...
    """
    shown = redact_url(url)

    def bad(why: str) -> CheckpointerURLError:
        why = " ".join(why.replace(url, shown).split())
        why = re.sub(r'\s*in URI: "[^"]*"$', "", why)  # libpq repeats the URL: once is enough
        return CheckpointerURLError(f"{shown} is not a valid PostgreSQL URL: {why}")

    try:
        from psycopg import conninfo
    except ImportError:  # pragma: no cover - depends on the install
        try:
            urlsplit(url)
        except ValueError as exc:
            raise bad(str(exc)) from None
        return
    try:
        params = conninfo.conninfo_to_dict(url)
    except Exception as exc:  # psycopg.ProgrammingError: libpq could not parse it
        raise bad(str(exc)) from None
    for port in str(params.get("port") or "").split(","):
        if port and not (port.isdigit() and 1 <= int(port) <= 65535):
            raise bad(f"the port {port!r} is not a number from 1 to 65535")


@contextlib.asynccontextmanager
async def open_checkpointer(
    spec: str | Path | BaseCheckpointSaver[Any],
    *,
    setup: bool = True,
    pool_size: int = DEFAULT_POOL_SIZE,
) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """An async checkpointer for ``spec`` (see the module docs), closed on exit.

    PostgreSQL only: ``setup=False`` opens a database that must already hold the checkpoint
    tables (a reader such as ``algenta-graph receipts`` creates nothing; a database without
    them raises :class:`CheckpointerError`); ``pool_size`` is the most connections this
    process holds at once.
    """
    if isinstance(spec, BaseCheckpointSaver):
        yield spec
        return
    if is_postgres_url(spec):
        check_postgres_url(str(spec).strip())
        async with _open_postgres(str(spec).strip(), setup=setup, pool_size=pool_size) as saver:
            yield saver
        return
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with AsyncSqliteSaver.from_conn_string(str(spec)) as saver:
        yield saver


@contextlib.asynccontextmanager
async def _open_postgres(url: str, *, setup: bool, pool_size: int) -> AsyncIterator[Any]:
    """``AsyncPostgresSaver`` over a connection pool; tables set up once; pool closed on exit."""
    try:
        import psycopg
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        from psycopg.rows import dict_row
        from psycopg_pool import AsyncConnectionPool
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise CheckpointerError(
            "a postgresql:// checkpointer needs the PostgreSQL extra: "
            'pip install "algenta-graph[postgres]"'
        ) from exc
    if pool_size < 1:
        raise ValueError(f"pool_size must be at least 1, got {pool_size}")
    settings: dict[str, Any] = {
        "autocommit": True,  # the saver commits each write itself (and setup() needs it)
        "prepare_threshold": 0,  # no server-side prepared statements (pgbouncer-safe)
        "row_factory": dict_row,  # the saver reads rows by column name
    }
    where = redact_url(url)
    # One direct connection first: it reports a refused or unreachable server with libpq's own
    # message (a pool would only time out), and runs setup() under an advisory lock.
    try:
        conn = await psycopg.AsyncConnection.connect(
            url, connect_timeout=CONNECT_TIMEOUT_SECONDS, **settings
        )
    except psycopg.Error as exc:
        raise CheckpointerError(
            f"cannot open the PostgreSQL checkpointer at {where}: {exc}".strip()
            + " (check that the server runs, the URL, the user and the password)"
        ) from exc
    async with conn:
        if setup:
            await _setup_once(conn, AsyncPostgresSaver)
        elif await _migration(conn) is None:
            raise CheckpointerError(
                f"{where} holds no LangGraph checkpoints (no checkpoint tables); "
                "a graph run against it creates them"
            )
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        url,
        min_size=1,
        max_size=pool_size,
        kwargs=settings,
        open=False,
        name="algenta-graph-checkpoints",
    )
    await pool.open(wait=True, timeout=CONNECT_TIMEOUT_SECONDS)
    try:
        yield AsyncPostgresSaver(pool)
    finally:
        await pool.close()


@contextlib.asynccontextmanager
async def server_checkpointer() -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """The checkpointer a LangGraph server runs the served graph on, from ``ALGENTA_CHECKPOINTER``.

    Name it in ``langgraph.json`` (the server enters it once at start and closes it at exit)::

        "checkpointer": {"path": "algenta_graph.serving.checkpointer.server_checkpointer"}

    and set ``ALGENTA_CHECKPOINTER=postgresql://...`` in the server's environment. Every
    checkpoint of every thread then lives in that database, where any worker (and
    ``algenta-graph receipts``) can read it. A SQLite path works too, for one process.
    """
    spec = os.environ.get(ENV_CHECKPOINTER, "").strip()
    if not spec:
        raise CheckpointerError(
            f"{ENV_CHECKPOINTER} is not set: set it to the checkpoint database "
            "(postgresql://user:password@host:5432/db) in the server's environment"
        )
    async with open_checkpointer(spec) as saver:
        yield saver


async def _migration(conn: Any) -> int | None:
    """The checkpoint tables' migration version, or ``None`` when there are none yet."""
    cur = await conn.execute("SELECT to_regclass('checkpoint_migrations') AS t")
    row = await cur.fetchone()
    if not row or row["t"] is None:
        return None
    cur = await conn.execute("SELECT max(v) AS v FROM checkpoint_migrations")
    row = await cur.fetchone()
    return None if not row or row["v"] is None else int(row["v"])


async def _setup_once(conn: Any, saver_type: Any) -> None:
    """Run ``setup()`` unless the tables are current; one process at a time.

    Serialised by a session advisory lock taken with ``pg_try_advisory_lock`` in a polling
    loop, never a blocking ``pg_advisory_lock``: a migration runs ``CREATE INDEX
    CONCURRENTLY``, which waits for every open transaction, including a blocked lock request
    (PostgreSQL then reports a deadlock).
    """
    if await _migration(conn) == len(saver_type.MIGRATIONS) - 1:
        return  # already set up: the common case of a worker starting
    deadline = asyncio.get_running_loop().time() + SETUP_LOCK_TIMEOUT_SECONDS
    while True:
        cur = await conn.execute("SELECT pg_try_advisory_lock(%s) AS ok", (_SETUP_LOCK_KEY,))
        row = await cur.fetchone()
        if row and row["ok"]:
            break
        if asyncio.get_running_loop().time() > deadline:
            raise CheckpointerError(
                f"another process held the checkpoint setup lock for over "
                f"{SETUP_LOCK_TIMEOUT_SECONDS}s"
            )
        await asyncio.sleep(0.05)
    try:
        await saver_type(conn).setup()
    finally:
        await conn.execute("SELECT pg_advisory_unlock(%s)", (_SETUP_LOCK_KEY,))
