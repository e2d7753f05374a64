"""Where a governed graph keeps its checkpoints: one resolver for a path, a URL or a saver.

``open_checkpointer(spec)`` is the single place that turns what a user passes (``--db`` on the
command line, ``checkpointer=`` in Python) into a LangGraph ``BaseCheckpointSaver``:

- a ``BaseCheckpointSaver`` instance: used as it is (the caller owns its life);
- a ``postgresql://`` / ``postgres://`` URL: ``AsyncPostgresSaver`` over a connection pool
  (the ``algenta-graph[postgres]`` extra);
- anything else: a SQLite file path (``AsyncSqliteSaver``).

Example::

    async with open_checkpointer("runs.sqlite") as saver:
        graph = await create_governed_agent(profile="execute", checkpointer=saver)
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

__all__ = ["is_postgres_url", "open_checkpointer"]

_PG_SCHEMES = ("postgresql://", "postgres://")


def is_postgres_url(spec: object) -> bool:
    """Whether ``spec`` names a PostgreSQL database rather than a SQLite file.

    >>> is_postgres_url("postgresql://u@localhost/db"), is_postgres_url("runs.sqlite")
    (True, False)
    """
    return isinstance(spec, str) and spec.strip().lower().startswith(_PG_SCHEMES)


@contextlib.asynccontextmanager
async def open_checkpointer(
    spec: str | Path | BaseCheckpointSaver[Any],
) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """An async checkpointer for ``spec`` (see the module docs), closed on exit."""
    if isinstance(spec, BaseCheckpointSaver):
        yield spec
        return
    if is_postgres_url(spec):
        raise NotImplementedError("PostgreSQL checkpointers are not wired yet")
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with AsyncSqliteSaver.from_conn_string(str(spec)) as saver:
        yield saver


def open_sqlite_read_only(path: str | Path) -> contextlib.closing[Any]:
    """``with open_sqlite_read_only(path) as conn``: a read-only ``sqlite3`` connection.

    The file is opened with ``mode=ro`` and ``query_only``: nothing is ever written to it, and
    a missing file raises ``FileNotFoundError`` instead of being created. (``receipts`` reads
    through this; graphs write through :func:`open_checkpointer`.)
    """
    import sqlite3

    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"no SQLite file at {file}")
    conn = sqlite3.connect(f"{file.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False)
    try:
        conn.execute("PRAGMA query_only = 1")
    except BaseException:
        conn.close()
        raise
    return contextlib.closing(conn)
