"""The ledger in a PostgreSQL database, on a pool of its own: every worker on every machine.

Opened on a ``postgresql://`` URL (the checkpointer's database by default), checked and shown
as the checkpointer's are (:mod:`algenta_graph.database_urls`: libpq's parser, no password in
any message); a refused or unreachable server is reported with libpq's own message. The pool's
connections are in autocommit mode (each statement its own transaction) without server-side
prepared statements (pgbouncer-safe). ``CREATE TABLE IF NOT EXISTS`` still races on a fresh
database (two sessions insert the same catalog row): the loser's error means the table is there.
"""

from __future__ import annotations

import contextlib
from typing import Any

from algenta_graph.database_urls import check_postgres_url, redact_url
from algenta_graph.errors import LedgerError
from algenta_graph.ledger.sql import DDL, TABLE, SqlLedger

__all__ = ["PostgresLedger"]

CONNECT_TIMEOUT_SECONDS = 10
DEFAULT_POOL_SIZE = 4
"""The most connections one process's ledger holds at once."""


class PostgresLedger(SqlLedger):
    """The ledger in the PostgreSQL database at ``url`` (open it with :meth:`connect`)."""

    def __init__(self, pool: Any, url: str) -> None:
        super().__init__()
        self._pool = pool
        self._where = redact_url(url)

    @classmethod
    async def connect(cls, url: str, *, pool_size: int = DEFAULT_POOL_SIZE) -> PostgresLedger:
        """A pool of its own on ``url``.

        Raises:
            CheckpointerURLError: the URL is malformed (nothing connected).
            LedgerError: the server refused or could not be reached, or the PostgreSQL extra
                is not installed.
        """
        check_postgres_url(url)
        where = redact_url(url)
        try:
            import psycopg
            from psycopg_pool import AsyncConnectionPool
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise LedgerError(
                "a postgresql:// ledger needs the PostgreSQL extra: "
                'pip install "algenta-graph[postgres]"'
            ) from exc
        settings: dict[str, Any] = {"autocommit": True, "prepare_threshold": 0}
        try:  # one direct connection first: libpq's own message for a refused server
            probe = await psycopg.AsyncConnection.connect(
                url, connect_timeout=CONNECT_TIMEOUT_SECONDS, **settings
            )
        except psycopg.Error as exc:
            raise LedgerError(
                f"cannot open the ledger at {where}: {exc}".strip()
                + " (check that the server runs, the URL, the user and the password)"
            ) from exc
        await probe.close()
        pool: Any = AsyncConnectionPool(
            url, min_size=1, max_size=pool_size, kwargs=settings, open=False, name="algenta-ledger"
        )
        await pool.open(wait=True, timeout=CONNECT_TIMEOUT_SECONDS)
        return cls(pool, url)

    @property
    def where(self) -> str:
        """The URL without its password."""
        return self._where

    async def aclose(self) -> None:
        """Close the pool."""
        await self._pool.close()

    async def _table_exists(self) -> bool:
        async with self._pool.connection() as conn, conn.cursor() as cur:
            await cur.execute("SELECT to_regclass(%s)", (TABLE,))
            row = await cur.fetchone()
        return bool(row and row[0])

    async def _exec(self, sql: str, params: tuple[Any, ...] = ()) -> tuple[int, list[Any]]:
        async with self._pool.connection() as conn, conn.cursor() as cur:
            if not self._ready:
                from psycopg import errors

                raced = (errors.UniqueViolation, errors.DuplicateTable, errors.DuplicateObject)
                with contextlib.suppress(*raced):
                    await cur.execute(DDL)
                self._ready = True
            await cur.execute(sql.replace("?", "%s"), params)
            rows = list(await cur.fetchall()) if cur.description else []
            return cur.rowcount, rows
