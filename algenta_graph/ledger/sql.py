"""The ledger's table and statements, shared by the SQLite and PostgreSQL backends.

One table, ``algenta_ledger``: a row per key (the primary key makes an insert-if-absent atomic),
the value as JSON (validated by kind when read back), the claimant's lease, ``done``. Every
operation is one statement, so it is atomic on its own: ``INSERT ... ON CONFLICT (key) DO
NOTHING`` for :meth:`~algenta_graph.ledger.store.Ledger.insert`, ``UPDATE ... WHERE key = ? AND
token = ? AND done = 0`` for the compare-and-set take-over. The table is created on first write
(``CREATE TABLE IF NOT EXISTS``); a reader (:meth:`~algenta_graph.ledger.store.Ledger.peek`)
creates nothing.
"""

from __future__ import annotations

import time
from abc import abstractmethod
from typing import Any

from pydantic import ValidationError

from algenta_graph.errors import LedgerError
from algenta_graph.ledger.entries import ENTRY_VALUE, Entry
from algenta_graph.ledger.store import Ledger

__all__ = ["TABLE", "SqlLedger"]

TABLE = "algenta_ledger"
"""The ledger's table, in the database it is given."""
DDL = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} (key TEXT PRIMARY KEY, value TEXT NOT NULL, "
    "token TEXT NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL, "
    "at DOUBLE PRECISION NOT NULL, done INTEGER NOT NULL DEFAULT 0)"
)


class SqlLedger(Ledger):
    """The ledger over one SQL table; a backend runs one statement (``?`` parameters)."""

    def __init__(self) -> None:
        self._ready = False
        """Whether this process made sure the table exists."""

    @abstractmethod
    async def _exec(self, sql: str, params: tuple[Any, ...] = ()) -> tuple[int, list[Any]]:
        """Run ``sql`` (the table created first, once); (rows affected, rows returned)."""

    @abstractmethod
    async def _table_exists(self) -> bool:
        """Whether the ledger's table exists (read-only)."""

    def _row(self, key: str, row: Any) -> Entry[Any]:
        value, token, host, pid, at, done = row
        try:
            parsed = ENTRY_VALUE.validate_json(value)
        except ValidationError as exc:
            raise LedgerError(
                f"the ledger's entry {key!r} at {self.where} is not a ledger entry "
                f"({exc.error_count()} problem(s): {exc.errors()[0]['msg']}): nothing was done "
                "with it"
            ) from None
        return Entry(key, parsed, str(token), str(host), int(pid), float(at), bool(done))

    async def _get(self, key: str) -> Entry[Any] | None:
        _, rows = await self._exec(
            f"SELECT value, token, host, pid, at, done FROM {TABLE} WHERE key = ?", (key,)
        )
        return self._row(key, rows[0]) if rows else None

    async def _peek(self, key: str) -> Entry[Any] | None:
        if not self._ready and not await self._table_exists():
            return None
        return await self._get(key)

    async def _insert(self, mine: Entry[Any]) -> Entry[Any] | None:
        await self._exec(
            f"INSERT INTO {TABLE} (key, value, token, host, pid, at) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING",
            (mine.key, mine.value.model_dump_json(), mine.token, mine.host, mine.pid, mine.at),
        )
        return await self._get(mine.key)

    async def _refresh(self, entry: Entry[Any]) -> None:
        await self._exec(
            f"UPDATE {TABLE} SET at = ? WHERE key = ? AND token = ? AND done = 0",
            (time.time(), entry.key, entry.token),
        )

    async def _take_over(self, old: Entry[Any], mine: Entry[Any]) -> bool:
        count, _ = await self._exec(
            f"UPDATE {TABLE} SET token = ?, host = ?, pid = ?, at = ? "
            "WHERE key = ? AND token = ? AND done = 0",
            (mine.token, mine.host, mine.pid, mine.at, old.key, old.token),
        )
        return count == 1

    async def _finish(self, entry: Entry[Any]) -> None:
        await self._exec(
            f"UPDATE {TABLE} SET done = 1 WHERE key = ? AND token = ?", (entry.key, entry.token)
        )
