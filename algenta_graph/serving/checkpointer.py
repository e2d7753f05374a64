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

A saver opened here remembers the path or URL it was opened from (:func:`database_of`): the
graph's ledger lives in the same database by default (:mod:`algenta_graph.ledger`), chosen from
that configuration, never from the saver's class.

Example::

    async with open_checkpointer("postgresql://app@db.internal/agents") as saver:
        graph = await create_governed_agent(profile="execute", checkpointer=saver)

Reading checkpoints back is :mod:`algenta_graph.serving.checkpoint_reader`.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

from algenta_graph.config.deployment import served_runtime
from algenta_graph.config.names import ENV_CHECKPOINTER
from algenta_graph.database_urls import check_postgres_url, is_postgres_url, redact_url
from algenta_graph.errors import CheckpointerError, CheckpointerURLError

__all__ = [
    "CheckpointerError",
    "CheckpointerURLError",
    "check_postgres_url",
    "database_of",
    "is_postgres_url",
    "open_checkpointer",
    "redact_url",
    "server_checkpointer",
]

_SETUP_LOCK_KEY = 0x616C67656E7461  # "algenta": the advisory lock that serialises setup()
DEFAULT_POOL_SIZE = 10
CONNECT_TIMEOUT_SECONDS = 10
SETUP_LOCK_TIMEOUT_SECONDS = 120


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
        url = str(spec).strip()
        check_postgres_url(url)
        async with _open_postgres(url, setup=setup, pool_size=pool_size) as saver:
            _OPENED[saver] = url
            yield saver
        return
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with AsyncSqliteSaver.from_conn_string(str(spec)) as saver:
        _OPENED[saver] = str(spec)
        yield saver


_OPENED: weakref.WeakKeyDictionary[BaseCheckpointSaver[Any], str] = weakref.WeakKeyDictionary()


def database_of(saver: object) -> str | None:
    """The path or URL :func:`open_checkpointer` opened ``saver`` from (``None``: not here)."""
    if not isinstance(saver, BaseCheckpointSaver):
        return None
    try:
        return _OPENED.get(saver)
    except TypeError:  # not weak-referenceable: not one of ours
        return None


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
    spec = served_runtime().algenta_checkpointer
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
