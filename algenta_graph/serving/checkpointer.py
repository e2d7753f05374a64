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

Reading checkpoints back (read-only, from a SQLite checkpoint file or any saver) has one
reader here: :func:`read_latest` / :func:`aread_latest` (each thread's latest root checkpoint)
and :func:`read_history` / :func:`aread_history` (every root checkpoint of each thread, oldest
first); :func:`read_thread_values`, :func:`read_thread_records` and the audit and chain modules
are views of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import sqlite3
from collections.abc import AsyncIterator, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from langgraph.checkpoint.base import BaseCheckpointSaver

from algenta_graph.errors import CheckpointerError, CheckpointerURLError, RecordsFileError
from algenta_graph.state import RECORD_FIELDS

__all__ = [
    "CheckpointerError",
    "CheckpointerURLError",
    "RecordsFileError",
    "StoredCheckpoint",
    "aread_history",
    "aread_latest",
    "aread_thread_values",
    "check_postgres_url",
    "is_postgres_url",
    "open_checkpointer",
    "open_sqlite_read_only",
    "read_history",
    "read_latest",
    "read_thread_records",
    "read_thread_values",
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


# ---------------------------------------------------------------------------------------------
# reading checkpoints back: the one reader (read-only)


@dataclass(frozen=True)
class StoredCheckpoint:
    """One root checkpoint of a thread, as read back from a checkpoint file or a saver.

    ``values``: its channel values (the state; only the fields asked for, when a reader was
    given ``fields``); ``channels``: every channel it holds a value or a version of (its
    ``channel_values`` and ``channel_versions``: each channel written so far); ``nodes``: the
    nodes whose input it has seen (``versions_seen``); ``versions``: its ``channel_versions``
    (a channel's version changes whenever LangGraph writes it); ``parent_id``: the checkpoint
    it follows (``None`` for a thread's first); ``step``: the superstep its metadata names
    (``None`` when it names none).
    """

    thread_id: str
    checkpoint_id: str
    parent_id: str | None
    step: int | None
    values: dict[str, Any]
    channels: frozenset[str] = field(default_factory=frozenset)
    nodes: frozenset[str] = field(default_factory=frozenset)
    versions: dict[str, Any] = field(default_factory=dict)


def _stored(
    thread_id: Any,
    checkpoint_id: Any,
    parent_id: Any,
    metadata: Any,
    checkpoint: Mapping[str, Any],
    fields: Collection[str] | None,
) -> StoredCheckpoint:
    channel_values = checkpoint["channel_values"]
    if not isinstance(channel_values, Mapping):
        raise TypeError(f"channel_values is a {type(channel_values).__name__}")
    if fields is None:
        values = dict(channel_values)
    else:
        values = {k: channel_values[k] for k in fields if k in channel_values}
    step = metadata.get("step") if isinstance(metadata, Mapping) else None
    versions = checkpoint.get("channel_versions")
    versions = dict(versions) if isinstance(versions, Mapping) else {}
    return StoredCheckpoint(
        thread_id=str(thread_id),
        checkpoint_id=str(checkpoint_id),
        parent_id=None if parent_id is None else str(parent_id),
        step=step if isinstance(step, int) and not isinstance(step, bool) else None,
        values=values,
        channels=frozenset(str(c) for c in (*channel_values, *versions)),
        nodes=frozenset(str(n) for n in checkpoint.get("versions_seen") or ()),
        versions={str(c): v for c, v in versions.items()},
    )


def _pick_latest(checkpoints: Iterable[StoredCheckpoint]) -> dict[str, StoredCheckpoint]:
    """The one rule for "a thread's latest checkpoint", applied to every thread.

    A thread's latest checkpoint is its root checkpoint with the greatest ``checkpoint_id``
    (LangGraph's ids sort in creation order); threads are sorted by id.
    """
    latest: dict[str, StoredCheckpoint] = {}
    for cp in checkpoints:
        have = latest.get(cp.thread_id)
        if have is None or cp.checkpoint_id > have.checkpoint_id:
            latest[cp.thread_id] = cp
    return dict(sorted(latest.items()))


def _group_history(checkpoints: Iterable[StoredCheckpoint]) -> dict[str, list[StoredCheckpoint]]:
    """Every root checkpoint per thread, oldest first (by ``checkpoint_id``); threads sorted."""
    history: dict[str, list[StoredCheckpoint]] = {}
    for cp in checkpoints:
        history.setdefault(cp.thread_id, []).append(cp)
    return {tid: sorted(cps, key=lambda c: c.checkpoint_id) for tid, cps in sorted(history.items())}


# SQLite files are read with plain SQL over a read-only connection (a SqliteSaver would run its
# setup(), a write); the rows are decoded with the serializer SqliteSaver writes with.
_SQLITE_COLUMNS = (
    "c.thread_id, c.checkpoint_id, c.parent_checkpoint_id, c.type, c.checkpoint, c.metadata"
)
_SQLITE_LATEST = f"""
SELECT {_SQLITE_COLUMNS} FROM checkpoints AS c
WHERE c.checkpoint_ns = '' {{thread}} AND c.checkpoint_id = (
    SELECT max(checkpoint_id) FROM checkpoints
    WHERE thread_id = c.thread_id AND checkpoint_ns = ''
)
ORDER BY c.thread_id
"""
_SQLITE_HISTORY = f"""
SELECT {_SQLITE_COLUMNS} FROM checkpoints AS c
WHERE c.checkpoint_ns = '' {{thread}}
ORDER BY c.thread_id, c.checkpoint_id
"""


def _sqlite_metadata(raw: Any) -> Any:
    try:
        return json.loads(raw) if raw is not None else None
    except (TypeError, ValueError):
        return None  # metadata only names the step: never a reason to refuse a checkpoint


def _sqlite_checkpoints(
    db: str | os.PathLike[str], thread: str | None, *, latest: bool, fields: Collection[str] | None
) -> list[StoredCheckpoint]:
    """Root checkpoints of a SQLite checkpoint file, read-only; errors name the file."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    path = Path(db)
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint file at {path}")
    if not path.is_file():
        raise RecordsFileError(f"{path} is not a file")
    serde = JsonPlusSerializer()  # what langgraph's SqliteSaver writes with by default
    query = (_SQLITE_LATEST if latest else _SQLITE_HISTORY).format(
        thread="AND c.thread_id = ?" if thread is not None else ""
    )
    out: list[StoredCheckpoint] = []
    try:
        with open_sqlite_read_only(path) as conn:
            try:
                tables = {
                    r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
                }
            except sqlite3.DatabaseError as exc:
                raise RecordsFileError(
                    f"{path} is not a readable SQLite database ({exc})"
                ) from None
            if "checkpoints" not in tables:
                raise RecordsFileError(
                    f"{path} is not a LangGraph SQLite checkpoint file (no checkpoints table)"
                )
            try:
                rows = conn.execute(query, (thread,) if thread is not None else ())
                for thread_id, checkpoint_id, parent_id, kind, blob, metadata in rows:
                    try:
                        checkpoint = serde.loads_typed((kind, blob))
                        cp = _stored(
                            thread_id,
                            checkpoint_id,
                            parent_id,
                            _sqlite_metadata(metadata),
                            checkpoint,
                            fields,
                        )
                    except Exception as exc:
                        raise RecordsFileError(
                            f"{path}: checkpoint {checkpoint_id} of thread {thread_id!r} cannot "
                            f"be decoded ({type(exc).__name__}: {_short(str(exc), 120)})"
                        ) from None
                    out.append(cp)
            except sqlite3.DatabaseError as exc:
                raise RecordsFileError(
                    f"{path} is not a readable LangGraph SQLite checkpoint file ({exc})"
                ) from None
    except sqlite3.Error as exc:  # e.g. the file cannot be opened at all
        raise RecordsFileError(f"{path} cannot be read as a SQLite database ({exc})") from None
    return out


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _from_tuple(item: Any, fields: Collection[str] | None) -> StoredCheckpoint | None:
    """A saver's ``CheckpointTuple`` as a :class:`StoredCheckpoint` (``None``: not a root one)."""
    conf = item.config["configurable"]
    if conf.get("checkpoint_ns"):
        return None
    parent = ((item.parent_config or {}).get("configurable") or {}).get("checkpoint_id")
    return _stored(
        conf["thread_id"], conf["checkpoint_id"], parent, item.metadata, item.checkpoint, fields
    )


def _saver_config(thread: str | None) -> Any:
    return None if thread is None else {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def _is_file(source: Any) -> bool:
    return isinstance(source, str | os.PathLike) and not is_postgres_url(source)


def _saver_checkpoints(
    saver: Any, thread: str | None, *, latest: bool, fields: Collection[str] | None
) -> Iterator[StoredCheckpoint]:
    if is_postgres_url(saver):
        raise TypeError(
            "a PostgreSQL URL is read through the async readers (aread_latest, aread_history)"
        )
    items: Iterable[Any]
    if latest and thread is not None:
        item = saver.get_tuple(_saver_config(thread))
        items = () if item is None else (item,)
    else:
        items = saver.list(_saver_config(thread))
    for item in items:
        cp = _from_tuple(item, fields)
        if cp is not None:
            yield cp


async def _asaver_checkpoints(
    saver: Any, thread: str | None, *, latest: bool, fields: Collection[str] | None
) -> list[StoredCheckpoint]:
    out: list[StoredCheckpoint] = []
    if latest and thread is not None:
        item = await saver.aget_tuple(_saver_config(thread))
        items = [] if item is None else [item]
    else:
        items = [item async for item in saver.alist(_saver_config(thread))]
    for item in items:
        cp = _from_tuple(item, fields)
        if cp is not None:
            out.append(cp)
    return out


async def _acheckpoints(
    source: Any, thread: str | None, *, latest: bool, fields: Collection[str] | None
) -> list[StoredCheckpoint]:
    if _is_file(source):
        return await asyncio.to_thread(
            _sqlite_checkpoints, source, thread, latest=latest, fields=fields
        )
    if is_postgres_url(source):
        async with open_checkpointer(str(source), setup=False) as saver:
            return await _asaver_checkpoints(saver, thread, latest=latest, fields=fields)
    return await _asaver_checkpoints(source, thread, latest=latest, fields=fields)


def read_latest(
    source: str | os.PathLike[str] | BaseCheckpointSaver[Any],
    thread: str | None = None,
    *,
    fields: Collection[str] | None = None,
) -> dict[str, StoredCheckpoint]:
    """Each thread's latest root checkpoint: ``{thread_id: StoredCheckpoint}``, sorted by id.

    ``source``: a SQLite checkpoint file (opened read-only: never written, never created) or a
    saver with a synchronous ``list`` (for an async saver or a PostgreSQL URL use
    :func:`aread_latest`). Only ``thread`` when given (``{}`` when it has no checkpoint);
    ``fields``: keep only these state values. For a file, raises ``FileNotFoundError`` when
    it does not exist and :class:`RecordsFileError` when it is not a SQLite database, not a
    checkpoint file, or holds a checkpoint that cannot be decoded.
    """
    if _is_file(source):
        rows: Iterable[StoredCheckpoint] = _sqlite_checkpoints(
            source,  # type: ignore[arg-type]
            thread,
            latest=True,
            fields=fields,
        )
    else:
        rows = _saver_checkpoints(source, thread, latest=True, fields=fields)
    return _pick_latest(rows)


async def aread_latest(
    source: str | os.PathLike[str] | BaseCheckpointSaver[Any],
    thread: str | None = None,
    *,
    fields: Collection[str] | None = None,
) -> dict[str, StoredCheckpoint]:
    """:func:`read_latest` for any saver (``alist``), a SQLite file, or a ``postgresql://`` URL.

    A URL is opened without creating anything (``open_checkpointer(url, setup=False)``).
    """
    return _pick_latest(await _acheckpoints(source, thread, latest=True, fields=fields))


def read_history(
    source: str | os.PathLike[str] | BaseCheckpointSaver[Any],
    thread: str | None = None,
    *,
    fields: Collection[str] | None = None,
) -> dict[str, list[StoredCheckpoint]]:
    """Every root checkpoint of each thread, oldest first: ``{thread_id: [StoredCheckpoint]}``.

    Sources, ``thread``, ``fields`` and errors as in :func:`read_latest`. A thread's history
    can branch (LangGraph's time travel): follow ``parent_id``, not the list order.
    """
    if _is_file(source):
        rows: Iterable[StoredCheckpoint] = _sqlite_checkpoints(
            source,  # type: ignore[arg-type]
            thread,
            latest=False,
            fields=fields,
        )
    else:
        rows = _saver_checkpoints(source, thread, latest=False, fields=fields)
    return _group_history(rows)


async def aread_history(
    source: str | os.PathLike[str] | BaseCheckpointSaver[Any],
    thread: str | None = None,
    *,
    fields: Collection[str] | None = None,
) -> dict[str, list[StoredCheckpoint]]:
    """:func:`read_history` for any saver, a SQLite file, or a ``postgresql://`` URL."""
    return _group_history(await _acheckpoints(source, thread, latest=False, fields=fields))


def read_thread_values(
    source: str | os.PathLike[str] | BaseCheckpointSaver[Any], thread: str | None = None
) -> dict[str, dict[str, Any]]:
    """Each thread's latest checkpointed state values: ``{thread_id: channel_values}``.

    The values of :func:`read_latest` (same sources, same errors), threads sorted by id.
    """
    return {tid: cp.values for tid, cp in read_latest(source, thread).items()}


async def aread_thread_values(
    source: str | os.PathLike[str] | BaseCheckpointSaver[Any], thread: str | None = None
) -> dict[str, dict[str, Any]]:
    """:func:`read_thread_values` for any saver, a SQLite file, or a ``postgresql://`` URL."""
    return {tid: cp.values for tid, cp in (await aread_latest(source, thread)).items()}


async def read_thread_records(
    saver: str | os.PathLike[str] | BaseCheckpointSaver[Any], thread: str | None = None
) -> dict[str, dict[str, list[Any]]]:
    """Every thread's receipts, denials and operator decisions, from any checkpoint saver.

    Returns ``{thread_id: {"receipts": [...], "denials": [...], "operator_decisions": [...]}}``
    from each thread's latest root checkpoint, sorted by thread id; only ``thread`` when given
    (``{}`` when it has no checkpoint). Reads only: nothing is written.
    """
    latest = await aread_latest(saver, thread, fields=RECORD_FIELDS)
    return {
        tid: {kind: list(cp.values.get(kind) or []) for kind in RECORD_FIELDS}
        for tid, cp in latest.items()
    }


def open_sqlite_read_only(path: str | Path) -> contextlib.closing[Any]:
    """A read-only ``sqlite3`` connection to the file ``path``, as a context manager.

    Use it as ``with open_sqlite_read_only(path) as conn``. The file is opened with
    ``mode=ro`` and ``query_only``: nothing is ever written to it, and a missing file raises
    ``FileNotFoundError`` instead of being created. (``receipts`` reads through this; graphs
    write through :func:`open_checkpointer`.)
    """
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
