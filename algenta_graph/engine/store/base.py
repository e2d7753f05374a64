"""The engine's SQLite file: one short connection per operation, and what every record kind shares.

Each record kind (a module of this package) declares its tables as :class:`Tables`; the store
creates them, or completes them with the columns added since the first release, when it opens
the file. Each operation opens its own short connection (WAL mode), so the store is safe to use
from the server thread and from a test thread reading it at the same time.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, ClassVar


def utc_now() -> str:
    """The current UTC time as ISO 8601 with a ``Z`` suffix (millisecond precision)."""
    now = datetime.now(timezone.utc)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


@dataclass(frozen=True)
class Tables:
    """The schema of one record kind.

    Attributes:
        create: its ``CREATE TABLE IF NOT EXISTS`` (and index) statements.
        added_columns: the columns added after the first release, ``(table, column,
            declaration)``, added to an older file when missing.
        after: statements run once those columns exist (an index on an added column).
    """

    create: str
    added_columns: tuple[tuple[str, str, str], ...] = ()
    after: tuple[str, ...] = ()


class StoreFile:
    """One SQLite file with the tables of :attr:`TABLES`, created (or completed) on first use.

    Args:
        path: the database file (its directory is created when missing).
    """

    TABLES: ClassVar[tuple[Tables, ...]] = ()
    """The record kinds of the file; the composed store lists every one."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._tx() as conn:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript("".join(t.create for t in self.TABLES))
            for table, column, declaration in (c for t in self.TABLES for c in t.added_columns):
                have = {r["name"] for r in conn.execute(f"PRAGMA table_info({table})")}
                if column not in have:
                    conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
            for statement in (s for t in self.TABLES for s in t.after):
                conn.execute(statement)

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """A connection of its own, in one transaction (committed on success), then closed."""
        conn = sqlite3.connect(self.path, timeout=30)
        conn.row_factory = sqlite3.Row
        try:
            with conn:
                yield conn
        finally:
            conn.close()

    def _one(self, query: str, params: tuple[Any, ...]) -> sqlite3.Row | None:
        """The first row ``query`` selects (``None`` if none), in a transaction of its own."""
        with self._tx() as conn:
            row: sqlite3.Row | None = conn.execute(query, params).fetchone()
        return row

    def _rows_with_json(self, query: str, column: str) -> list[dict[str, Any]]:
        """The rows ``query`` selects, as dicts, with ``column`` read back from its JSON."""
        with self._tx() as conn:
            rows = conn.execute(query).fetchall()
        return [{**dict(r), column: json.loads(r[column])} for r in rows]
