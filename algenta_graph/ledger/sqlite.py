"""The ledger in a SQLite file, on a connection of its own: every process of one machine.

Opened on the file's path (the checkpointer's own file by default: the ledger's table sits
beside the checkpoints), never on a saver's connection. The connection is in autocommit mode
(each statement its own transaction) with a busy timeout; the file is switched to WAL (readers
never block the writer) when the table is first made. A "database is locked" that SQLite reports
before a statement runs (another process switching the file's journal, a writer holding the lock
past the timeout) is retried: nothing was written. Python's own ``sqlite3``, each statement in a
worker thread: ``aiosqlite`` keeps a thread per connection that holds the interpreter open at exit
until the connection is closed.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from pathlib import Path
from typing import Any

from algenta_graph.errors import LedgerError
from algenta_graph.ledger.sql import DDL, TABLE, SqlLedger

__all__ = ["SqliteLedger"]

BUSY_TIMEOUT_SECONDS = 30.0
"""How long a statement waits for another process's write lock."""
LOCKED_RETRIES = 20
"""How many times a statement SQLite refused as locked is tried again."""


class SqliteLedger(SqlLedger):
    """The ledger in the SQLite file ``path`` (open it with :meth:`connect`).

    Each statement runs in a worker thread (``asyncio.to_thread``) on the ledger's one
    ``sqlite3`` connection, one at a time: nothing blocks the event loop, and no thread of its
    own outlives the program (a ledger never closed does not keep the interpreter from exiting).
    """

    def __init__(self, conn: sqlite3.Connection, path: str) -> None:
        super().__init__()
        self._conn = conn
        self._path = path
        self._lock = asyncio.Lock()  # one statement at a time on the connection

    @classmethod
    async def connect(cls, path: str | os.PathLike[str]) -> SqliteLedger:
        """A connection of its own to the file ``path`` (created if missing; no table yet).

        Raises:
            LedgerError: the file cannot be opened (the message names it).
        """
        where = str(Path(path))
        try:
            conn = await asyncio.to_thread(
                sqlite3.connect,
                where,
                timeout=BUSY_TIMEOUT_SECONDS,
                isolation_level=None,  # autocommit: each statement its own transaction
                check_same_thread=False,  # used from worker threads, one at a time
            )
        except (OSError, sqlite3.Error) as exc:
            raise LedgerError(f"cannot open the ledger in the SQLite file {where}: {exc}") from exc
        return cls(conn, where)

    @property
    def where(self) -> str:
        """The file's path."""
        return self._path

    async def aclose(self) -> None:
        """Close the connection."""
        async with self._lock:
            await asyncio.to_thread(self._conn.close)

    async def _table_exists(self) -> bool:
        found = await self._run(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (TABLE,)
        )
        return bool(found[1])

    async def _exec(self, sql: str, params: tuple[Any, ...] = ()) -> tuple[int, list[Any]]:
        for attempt in range(LOCKED_RETRIES):
            try:
                return await self._exec_once(sql, params)
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or attempt == LOCKED_RETRIES - 1:
                    raise
                await asyncio.sleep(0.05 * (attempt + 1))
        raise AssertionError("unreachable")

    async def _exec_once(self, sql: str, params: tuple[Any, ...]) -> tuple[int, list[Any]]:
        if not self._ready:
            await self._run("PRAGMA journal_mode=WAL")
            await self._run(DDL)
            self._ready = True
        return await self._run(sql, params)

    async def _run(self, sql: str, params: tuple[Any, ...] = ()) -> tuple[int, list[Any]]:
        def run() -> tuple[int, list[Any]]:
            cursor = self._conn.execute(sql, params)
            try:
                return cursor.rowcount, list(cursor.fetchall())
            finally:
                cursor.close()

        async with self._lock:
            return await asyncio.to_thread(run)
