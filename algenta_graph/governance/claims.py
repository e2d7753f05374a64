"""One answer per escalation: an atomic claim shared by every process on one checkpointer.

Two operators may resume the same escalated thread at once, from two processes or machines.
LangGraph checkpoints cannot arbitrate that (each resume writes its own child checkpoint), so
before any side effect a denial handler **claims** the escalation; exactly one answer wins
(``docs/ARCHITECTURE.md``, invariant 10). The claim lives next to the checkpoints:

- ``AsyncSqliteSaver``: a table ``algenta_escalation_claims`` in the same SQLite file;
- ``AsyncPostgresSaver``: the same table in the same database;
- any other saver (``InMemorySaver``, the ``langgraph dev`` runtime, none): in this process.

A claim is keyed by the **escalation's own identity** (:func:`escalation_key`: the
``escalation_id`` each escalated denial carries from the moment it is raised), never by the
thread, the task or the checkpoint namespace: a copy of the thread, a new task after a cancel,
another process or another worker all meet the same claim, so exactly one answer takes effect
(``docs/ARCHITECTURE.md``, invariant 12).

A claim records the answer, its claimant (a random token, the host and the process id), when it
was last known alive (``at``, refreshed while its side effects run) and whether they finished.
A resume that meets a claim in force learns who decided (:class:`EscalationAlreadyDecided`). A
claim whose claimant is gone before finishing is **taken over** by compare-and-set and completed
in the claimant's name, never the new resume's: its process is gone (same host), its run was
cancelled (this process, :func:`release` without :meth:`ClaimStore.finish`), or it has not been
refreshed for :data:`LEASE_SECONDS` (any host).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import socket
import sqlite3
import threading
import time
import uuid
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from algenta_graph.errors import EscalationAlreadyDecided

__all__ = [
    "HEARTBEAT_SECONDS",
    "LEASE_SECONDS",
    "Claim",
    "ClaimStore",
    "EscalationAlreadyDecided",
    "claims_for",
    "escalation_key",
    "new_claim",
    "release",
]

LEASE_SECONDS = 30.0
"""An unfinished claim not refreshed for this long is treated as abandoned (any host)."""
HEARTBEAT_SECONDS = 5.0
"""How often a claimant refreshes its claim while the answer's side effects run."""
_TABLE = "algenta_escalation_claims"
_LOCKED_RETRIES = 20


@dataclass(frozen=True)
class Claim:
    """Who answered an escalation, how, and whether the answer's side effects finished."""

    key: str
    answer: dict[str, Any]
    token: str
    host: str
    pid: int
    at: float
    done: bool = False

    @property
    def operator(self) -> str:
        """Who answered: the answer's ``operator`` (``"?"`` when it names none)."""
        return str(self.answer.get("operator", "?"))

    @property
    def thread_id(self) -> str | None:
        """The thread in which the answer was given (a copy's claim names its original)."""
        thread = self.answer.get("thread_id")
        return str(thread) if thread else None

    @property
    def summary(self) -> str:
        """How: the answer's actions, comma-separated (``"?"`` when it lists none)."""
        actions = [str(d.get("action")) for d in self.answer.get("decisions", [])]
        return ", ".join(actions) or "?"

    def abandoned(self, now: float | None = None) -> bool:
        """Whether the claimant is gone without finishing (its answer may be completed)."""
        if self.done:
            return False
        if self.host == socket.gethostname():
            if self.pid == os.getpid():
                # this process: abandoned once its run let go without finishing (cancelled)
                with _LIVE_LOCK:
                    if self.token not in _LIVE:
                        return True
            else:
                try:
                    os.kill(self.pid, 0)
                except ProcessLookupError:
                    return True
                except PermissionError:
                    pass
        return (now if now is not None else time.time()) - self.at > LEASE_SECONDS


_LIVE: set[str] = set()
"""Tokens of this process's claims whose side effects may still be running."""
_LIVE_LOCK = threading.Lock()


def new_claim(key: str, answer: dict[str, Any]) -> Claim:
    """A claim of ``key`` by this process, live until :func:`release`."""
    claim = Claim(key, answer, uuid.uuid4().hex, socket.gethostname(), os.getpid(), time.time())
    with _LIVE_LOCK:
        _LIVE.add(claim.token)
    return claim


def release(claim: Claim) -> None:
    """This process no longer works on ``claim``: unfinished, it may now be taken over."""
    with _LIVE_LOCK:
        _LIVE.discard(claim.token)


def escalation_key(escalation_ids: Iterable[str]) -> str:
    """The claim key of one answer to these escalations (one interrupt may list several).

    >>> escalation_key(["esc_b", "esc_a"])
    'escalations:esc_a,esc_b'
    """
    return "escalations:" + ",".join(sorted(escalation_ids))


class ClaimStore:
    """Atomic claims (the in-process implementation; subclasses share a database)."""

    def __init__(self) -> None:
        self._claims: dict[str, Claim] = {}
        self._lock = threading.Lock()  # never held across an await; safe on any event loop

    async def get(self, key: str) -> Claim | None:
        """The claim in force for ``key``, if any (nothing is written)."""
        with self._lock:
            return self._claims.get(key)

    async def peek(self, key: str) -> Claim | None:
        """:meth:`get`, creating nothing: a store without the claim table has no claim."""
        return await self.get(key)

    async def claim(self, mine: Claim) -> Claim:
        """Insert ``mine`` unless the key is claimed; return the claim in force."""
        with self._lock:
            return self._claims.setdefault(mine.key, mine)

    async def refresh(self, claim: Claim) -> None:
        """The claimant is alive: move its unfinished claim's ``at`` to now."""
        with self._lock:
            current = self._claims.get(claim.key)
            if current is not None and current.token == claim.token and not current.done:
                self._claims[claim.key] = dataclasses.replace(current, at=time.time())

    async def take_over(self, old: Claim, mine: Claim) -> bool:
        """Compare-and-set: replace ``old`` (abandoned) by ``mine`` keeping ``old``'s answer."""
        with self._lock:
            current = self._claims.get(old.key)
            if current is None or current.token != old.token or current.done:
                return False  # taken over already, or finished: never completed twice here
            self._claims[old.key] = _adopt(old, mine)
            return True

    async def finish(self, claim: Claim) -> None:
        """The answer's side effects finished: mark ``claim`` done (if it is still in force)."""
        with self._lock:
            current = self._claims.get(claim.key)
            if current is not None and current.token == claim.token:
                self._claims[claim.key] = _done(current)


def _adopt(old: Claim, mine: Claim) -> Claim:
    return Claim(old.key, old.answer, mine.token, mine.host, mine.pid, mine.at)


def _done(claim: Claim) -> Claim:
    return Claim(claim.key, claim.answer, claim.token, claim.host, claim.pid, claim.at, True)


def _row(key: str, row: Any) -> Claim:
    answer, token, host, pid, at, done = row
    return Claim(key, json.loads(answer), token, host, int(pid), float(at), bool(done))


class _SqlClaims(ClaimStore):
    """A claim table next to the checkpoints; subclasses run one statement (``?`` params)."""

    DDL = (
        f"CREATE TABLE IF NOT EXISTS {_TABLE} (key TEXT PRIMARY KEY, answer TEXT, token TEXT, "
        "host TEXT, pid INTEGER, at DOUBLE PRECISION, done INTEGER DEFAULT 0)"
    )

    def __init__(self, saver: Any) -> None:
        super().__init__()
        self.saver = saver
        self._ready = False

    async def _exec(self, sql: str, params: tuple[Any, ...] = ()) -> tuple[int, list[Any]]:
        """Run ``sql``; (rows affected, rows returned)."""
        raise NotImplementedError

    async def _get(self, key: str) -> Claim:
        found = await self.get(key)
        assert found is not None, f"claim {key!r} vanished"
        return found

    async def get(self, key: str) -> Claim | None:
        _, rows = await self._exec(
            f"SELECT answer, token, host, pid, at, done FROM {_TABLE} WHERE key = ?", (key,)
        )
        return _row(key, rows[0]) if rows else None

    async def peek(self, key: str) -> Claim | None:
        if not self._ready and not await self._table_exists():
            return None
        return await self.get(key)

    async def _table_exists(self) -> bool:
        """Whether the claim table exists (read-only)."""
        raise NotImplementedError

    async def refresh(self, claim: Claim) -> None:
        await self._exec(
            f"UPDATE {_TABLE} SET at = ? WHERE key = ? AND token = ? AND done = 0",
            (time.time(), claim.key, claim.token),
        )

    async def claim(self, mine: Claim) -> Claim:
        await self._exec(
            f"INSERT INTO {_TABLE} (key, answer, token, host, pid, at) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING",
            (mine.key, json.dumps(mine.answer), mine.token, mine.host, mine.pid, mine.at),
        )
        return await self._get(mine.key)

    async def take_over(self, old: Claim, mine: Claim) -> bool:
        count, _ = await self._exec(
            f"UPDATE {_TABLE} SET token = ?, host = ?, pid = ?, at = ? "
            "WHERE key = ? AND token = ? AND done = 0",
            (mine.token, mine.host, mine.pid, mine.at, old.key, old.token),
        )
        return count == 1

    async def finish(self, claim: Claim) -> None:
        await self._exec(
            f"UPDATE {_TABLE} SET done = 1 WHERE key = ? AND token = ?", (claim.key, claim.token)
        )


class _SqliteClaims(_SqlClaims):
    async def _table_exists(self) -> bool:
        await self.saver.setup()
        async with self.saver.lock:
            cursor = await self.saver.conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (_TABLE,)
            )
            found = await cursor.fetchall()
            await cursor.close()
        return bool(found)

    async def _exec(self, sql: str, params: tuple[Any, ...] = ()) -> tuple[int, list[Any]]:
        # another process may hold the file's write lock (or be switching it to WAL): a
        # "database is locked" happens before the statement runs, so trying again is safe
        for attempt in range(_LOCKED_RETRIES):
            try:
                return await self._exec_once(sql, params)
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or attempt == _LOCKED_RETRIES - 1:
                    raise
                await self.saver.conn.rollback()
                await asyncio.sleep(0.05 * (attempt + 1))
        raise AssertionError("unreachable")

    async def _exec_once(self, sql: str, params: tuple[Any, ...]) -> tuple[int, list[Any]]:
        await self.saver.setup()
        async with self.saver.lock:
            if not self._ready:
                await self.saver.conn.execute(self.DDL)
                self._ready = True
            cursor = await self.saver.conn.execute(sql, params)
            rows = list(await cursor.fetchall())
            count = cursor.rowcount
            await cursor.close()
            await self.saver.conn.commit()
        return count, rows


class _PostgresClaims(_SqlClaims):
    async def _table_exists(self) -> bool:
        async with self.saver._cursor() as cur:
            await cur.execute("SELECT to_regclass(%s) AS found", (_TABLE,))
            row = await cur.fetchone()
        return bool(row and next(iter(row.values())))

    async def _exec(self, sql: str, params: tuple[Any, ...] = ()) -> tuple[int, list[Any]]:
        async with self.saver._cursor() as cur:
            if not self._ready:
                # CREATE ... IF NOT EXISTS still races on a fresh database (two sessions insert
                # the same catalog row): the loser's error means the table is there
                from psycopg import errors

                raced = (errors.UniqueViolation, errors.DuplicateTable, errors.DuplicateObject)
                with contextlib.suppress(*raced):
                    await cur.execute(self.DDL)
                self._ready = True
            await cur.execute(sql.replace("?", "%s"), params)
            rows = [tuple(r.values()) for r in await cur.fetchall()] if cur.description else []
            return cur.rowcount, rows


_STORES: weakref.WeakKeyDictionary[Any, ClaimStore] = weakref.WeakKeyDictionary()
_PROCESS = ClaimStore()


def claims_for(checkpointer: Any) -> ClaimStore:
    """The claim store that every process sharing ``checkpointer``'s database sees."""
    if checkpointer is None:
        return _PROCESS
    try:
        found = _STORES.get(checkpointer)
    except TypeError:  # not weak-referenceable
        return _PROCESS
    if found is not None:
        return found
    kind = type(checkpointer).__name__
    store: ClaimStore
    if kind == "AsyncSqliteSaver":
        store = _SqliteClaims(checkpointer)
    elif kind == "AsyncPostgresSaver":
        store = _PostgresClaims(checkpointer)
    else:
        store = ClaimStore()
    _STORES[checkpointer] = store
    return store
