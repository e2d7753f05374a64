"""The ledger (``algenta_graph/ledger``; ``docs/ARCHITECTURE.md``, invariants 12 and 17).

Its backends: this process's memory, and a SQLite file on connections of its own (two ledgers on
one file: what two processes on one machine see; never a saver's connection). An entry is won
once; an abandoned entry (its process is gone) is taken over by compare-and-set exactly once,
keeping its value; values are typed, and a key holding another kind is refused. The choice of
a ledger: explicit, implied by the deployment, declared single process, or refused. Racing
operators in two processes: ``tests/guarantees/test_governance_race.py``; PostgreSQL:
``tests/postgres/``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import socket
import sqlite3
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from algenta_graph.errors import (
    CheckpointerURLError,
    EscalationAlreadyDecided,
    LedgerError,
    LedgerRequired,
)
from algenta_graph.ledger import (
    HEARTBEAT_SECONDS,
    LEASE_SECONDS,
    MEMORY,
    AnswerDecision,
    CallOutcome,
    CallStart,
    ClaimAnswer,
    Entry,
    Ledger,
    MemoryLedger,
    NoticeMark,
    choose_ledger,
    describe_ledger,
    escalation_key,
    new_entry,
    open_ledger,
    process_ledger,
    release,
)
from algenta_graph.ledger import sqlite as sqlite_module
from algenta_graph.ledger.sqlite import SqliteLedger


def _answer(operator: str, *actions: str) -> ClaimAnswer:
    return ClaimAnswer(
        operator=operator,
        decisions=[
            AnswerDecision(
                action="override" if a == "override" else "decline",
                type="approve" if a == "override" else "reject",
                verdict="approved" if a == "override" else "declined",
                reason="ok",
            )
            for a in actions or ("override",)
        ],
    )


ANSWER = _answer("ana")


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_new_entry_names_this_process_and_a_fresh_token() -> None:
    before = time.time()
    entry = new_entry("k", ANSWER)
    assert (entry.key, entry.value, entry.host, entry.pid) == (
        "k",
        ANSWER,
        socket.gethostname(),
        os.getpid(),
    )
    assert before <= entry.at <= time.time() and entry.done is False
    assert len(entry.token) == 32 and new_entry("k", ANSWER).token != entry.token
    assert ANSWER.operator == "ana" and ANSWER.summary == "override"
    assert ClaimAnswer(operator="x", decisions=[]).summary == "?"
    assert _answer("bo", "decline", "override").summary == "decline, override"


def test_who_counts_as_having_abandoned_an_entry() -> None:
    now = time.time()
    mine = new_entry("k", ANSWER)
    assert not mine.abandoned(now)  # this very process is alive
    gone = dataclasses.replace(mine, pid=dead_pid())
    assert gone.abandoned(now)
    assert not dataclasses.replace(gone, done=True).abandoned(now)  # finished: never abandoned
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as alive:
        try:  # a live process of ours (never a parent: a mutated signal must not reach it)
            assert not dataclasses.replace(mine, pid=alive.pid).abandoned(now)
            # only probed (signal 0), never signalled: it is still running a moment later
            with pytest.raises(subprocess.TimeoutExpired):
                alive.wait(timeout=0.5)
        finally:
            alive.kill()
    elsewhere = dataclasses.replace(mine, host="another-host", pid=dead_pid())
    assert not elsewhere.abandoned(now)  # another host: only the lease tells
    assert not elsewhere.abandoned(mine.at + LEASE_SECONDS)
    assert elsewhere.abandoned(mine.at + LEASE_SECONDS + 1)
    assert dataclasses.replace(mine, at=now - LEASE_SECONDS - 1).abandoned()
    assert LEASE_SECONDS == 30.0 and HEARTBEAT_SECONDS == 5.0
    # this process let go of its entry without finishing it (its run was cancelled): abandoned
    # at once, whatever the lease says; finished, never
    release(mine)
    assert mine.abandoned(now)
    assert not dataclasses.replace(mine, done=True).abandoned(now)
    assert not new_entry("k", ANSWER).abandoned(now)


def test_abandoned_when_the_pid_cannot_be_signalled_relies_on_the_lease(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(pid: int, sig: int) -> None:
        raise PermissionError

    monkeypatch.setattr("algenta_graph.ledger.entries.os.kill", refuse)
    entry = dataclasses.replace(new_entry("k", ANSWER), pid=1)
    assert not entry.abandoned(entry.at)
    assert entry.abandoned(entry.at + LEASE_SECONDS + 1)


def test_already_decided_names_the_winner_where_when_and_whether_it_is_still_applied() -> None:
    error = EscalationAlreadyDecided(new_entry("k", ANSWER))
    assert str(error) == (
        "escalation already decided by ana (override, still being applied); that answer takes "
        "effect, and nothing was done or recorded in this resume's name"
    )
    given = ANSWER.model_copy(update={"thread_id": "t9", "decided_at": "2026-01-01T00:00:00Z"})
    done = dataclasses.replace(new_entry("k", given), done=True)
    assert str(EscalationAlreadyDecided(done)) == (
        "escalation already decided by ana (override in thread t9 at 2026-01-01T00:00:00Z); that "
        "answer takes effect, and nothing was done or recorded in this resume's name"
    )
    # shown to API clients by the LangGraph server (it masks other exceptions' messages)
    assert isinstance(error, RuntimeError)


async def exercise(store: Ledger, other: Ledger) -> None:
    """The ledger's protocol, with ``other`` a second view of the same ledger."""
    first = dataclasses.replace(new_entry("k1", ANSWER), at=time.time() - 100)
    second = new_entry("k1", _answer("bo"))
    assert await store.get("k1", ClaimAnswer) is None and await other.get("k1", ClaimAnswer) is None
    assert await store.insert(first) == first
    seen = await other.get("k1", ClaimAnswer)  # read, never written
    assert seen is not None and (seen.token, seen.value) == (first.token, ANSWER)
    # a refresh moves only the live claimant's "at"
    await other.refresh(second)
    assert (await store.get("k1", ClaimAnswer)).at == pytest.approx(first.at)  # type: ignore[union-attr]
    await other.refresh(first)
    refreshed = await store.get("k1", ClaimAnswer)
    assert refreshed is not None and refreshed.token == first.token
    assert refreshed.at > first.at + 99  # now, not 100 s ago
    held = await other.insert(second)  # the first entry wins, seen from anywhere
    assert (held.token, held.value.operator, held.done) == (first.token, "ana", False)
    # take over only the entry in force, keeping its value
    third = new_entry("k1", _answer("cy"))
    assert not await other.take_over(second, third)
    assert await other.take_over(first, third)
    adopted = await store.insert(new_entry("k1", _answer("x")))
    assert (adopted.token, adopted.value, adopted.host, adopted.pid) == (
        third.token,
        ANSWER,
        third.host,
        third.pid,
    )
    assert adopted.at == pytest.approx(third.at)
    # finish: only by the entry's token
    await store.finish(first)
    assert (await other.insert(new_entry("k1", ANSWER))).done is False
    await store.finish(adopted)
    finished = await other.insert(new_entry("k1", ANSWER))
    assert finished.done is True
    at = finished.at
    await store.refresh(adopted)  # a finished entry is never refreshed
    assert (await other.get("k1", ClaimAnswer)).at == pytest.approx(at)  # type: ignore[union-attr]
    assert (finished.key, finished.value, finished.token, finished.host, finished.pid) == (
        "k1",
        ANSWER,
        third.token,
        third.host,
        third.pid,
    )
    assert finished.at >= third.at
    # other keys are independent; finishing an unknown key does nothing
    assert (await store.insert(second_key := new_entry("k2", ANSWER))).token == second_key.token
    await store.finish(new_entry("k3", ANSWER))
    assert not await store.take_over(new_entry("k3", ANSWER), new_entry("k3", ANSWER))
    # every kind of value reads back as itself
    start = new_entry("s", CallStart(tool="refund", started_at="T0", thread_id="t"))
    result = new_entry("r", CallOutcome(result="unknown", content="?", status="error"))
    notice = new_entry("n", NoticeMark(escalation_id="esc_1"))
    await store.insert(start)
    await store.insert(result)
    await store.insert(notice)
    assert (await other.get("s", CallStart)).value == start.value  # type: ignore[union-attr]
    assert (await other.get("r", CallOutcome)).value == result.value  # type: ignore[union-attr]
    assert (await other.get("n", NoticeMark)).value == notice.value  # type: ignore[union-attr]
    # a key holding another kind is refused by name, never read as the kind asked for
    with pytest.raises(LedgerError, match="'s' holds a 'call-start' entry, not the CallOutcome"):
        await other.get("s", CallOutcome)
    with pytest.raises(LedgerError, match="holds a 'answer' entry"):
        await other.insert(new_entry("k1", NoticeMark(escalation_id="x")))


def test_the_in_process_ledger() -> None:
    store = MemoryLedger()
    asyncio.run(exercise(store, store))
    assert store.where == f"memory of process {os.getpid()}"
    assert process_ledger() is process_ledger()


async def finished_then_taken_over(store: Ledger) -> bool:
    entry = new_entry("k", ANSWER)
    await store.insert(entry)
    await store.finish(entry)
    return await store.take_over(entry, new_entry("k", ANSWER))


def test_a_finished_entry_is_never_taken_over_in_sqlite(tmp_path: Path) -> None:
    async def go() -> bool:
        async with open_ledger(tmp_path / "c.sqlite") as store:
            return await finished_then_taken_over(store)

    assert asyncio.run(go()) is False


def test_a_finished_entry_is_never_taken_over_in_process() -> None:
    assert asyncio.run(finished_then_taken_over(MemoryLedger())) is False


def test_two_ledgers_on_one_sqlite_file_share_it_on_connections_of_their_own(
    tmp_path: Path,
) -> None:
    async def go() -> None:
        db = tmp_path / "checkpoints.sqlite"
        async with open_ledger(db) as store, open_ledger(str(db)) as other:
            assert isinstance(store, SqliteLedger) and store is not other
            assert store.where == str(db)
            await exercise(store, other)

    asyncio.run(go())


class Locked:
    """Stands in for a SQLite ledger's ``_exec_once``: fails ``times`` times with ``error``,
    then runs the real statement; and for ``asyncio`` in ledger/sqlite.py (its sleeps are
    recorded)."""

    def __init__(self, store: Any, times: int, error: str = "database is locked") -> None:
        self.real = store._exec_once
        self.times = times
        self.error = error
        self.attempts = 0
        self.sleeps: list[float] = []
        store._exec_once = self.exec_once

    async def exec_once(self, sql: str, params: tuple[Any, ...]) -> Any:
        self.attempts += 1
        if self.attempts <= self.times:
            raise sqlite3.OperationalError(self.error)
        return await self.real(sql, params)

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)  # the rest of asyncio, as it is


def locked_insert(tmp_path: Path, monkeypatch: Any, times: int, error: str) -> tuple[Any, Locked]:
    async def go() -> tuple[Any, Locked]:
        async with open_ledger(tmp_path / "c.sqlite") as store:
            locked = Locked(store, times, error)
            monkeypatch.setattr(sqlite_module, "asyncio", locked)
            try:
                return await store.insert(new_entry("k", ANSWER)), locked
            except sqlite3.OperationalError as exc:
                return exc, locked

    return asyncio.run(go())


def test_a_locked_ledger_is_tried_again(tmp_path: Path, monkeypatch: Any) -> None:
    entry, locked = locked_insert(tmp_path, monkeypatch, 3, "database is locked")
    assert isinstance(entry, Entry) and entry.value == ANSWER
    assert locked.attempts == 5  # 3 locked, the INSERT, the SELECT
    assert locked.sleeps == pytest.approx([0.05, 0.1, 0.15])


def test_a_ledger_locked_for_good_fails_after_the_last_try(
    tmp_path: Path, monkeypatch: Any
) -> None:
    error, locked = locked_insert(tmp_path, monkeypatch, 100, "database table is locked")
    assert isinstance(error, sqlite3.OperationalError)
    assert str(error) == "database table is locked"
    assert locked.attempts == 20
    assert locked.sleeps == pytest.approx([0.05 * n for n in range(1, 20)])


def test_any_other_database_error_is_raised_at_once(tmp_path: Path, monkeypatch: Any) -> None:
    error, locked = locked_insert(tmp_path, monkeypatch, 1, "no such table: x")
    assert isinstance(error, sqlite3.OperationalError) and str(error) == "no such table: x"
    assert (locked.attempts, locked.sleeps) == (1, [])


def test_the_escalation_key_is_the_sorted_identities() -> None:
    assert escalation_key(["esc_2", "esc_1"]) == escalation_key(("esc_1", "esc_2"))
    assert escalation_key(["esc_1"]) == "escalations:esc_1"
    assert escalation_key(["esc_1"]) != escalation_key(["esc_1", "esc_2"])


def test_a_damaged_row_is_refused_by_name_never_read_as_an_entry(tmp_path: Path) -> None:
    db = tmp_path / "c.sqlite"

    async def go() -> None:
        async with open_ledger(db) as store:
            await store.insert(new_entry("k", ANSWER))
            with sqlite3.connect(db) as conn:
                conn.execute("UPDATE algenta_ledger SET value = ? WHERE key = 'k'", ('{"x": 1}',))
            with pytest.raises(LedgerError, match=r"the ledger's entry 'k' at .* is not a ledger"):
                await store.get("k", ClaimAnswer)

    asyncio.run(go())


# ---------------------------------------------------------------------------------------------
# two ledgers racing on one escalation, then a take-over


async def _race_and_take_over(a: Ledger, b: Ledger) -> None:
    mine, theirs = new_entry("t|k", _answer("ana")), new_entry("t|k", _answer("bo"))
    won_a, won_b = await asyncio.gather(a.insert(mine), b.insert(theirs))
    # both see the same single winner
    assert won_a.token == won_b.token and won_a.token in {mine.token, theirs.token}
    assert not won_a.abandoned()  # its process (this one) is alive
    # the winner's process dies before finishing: the entry may be taken over, once
    dead = replace(won_a, pid=dead_pid())
    assert dead.abandoned()
    stale = replace(won_a, token="not-the-claimants")
    assert not await a.take_over(stale, new_entry("t|k", _answer("cy")))  # a stale view: refused
    if isinstance(a, MemoryLedger):
        a._entries["t|k"] = dead  # the in-process ledger: plant the dead claimant
    else:
        await a._exec(  # type: ignore[attr-defined]
            "UPDATE algenta_ledger SET pid = ? WHERE key = ?", (dead.pid, "t|k")
        )
    first, second = new_entry("t|k", _answer("cy")), new_entry("t|k", _answer("di"))
    took = await asyncio.gather(a.take_over(dead, first), b.take_over(dead, second))
    assert sorted(took) == [False, True]
    current = await a.insert(new_entry("t|k", _answer("eve")))
    assert current.value.operator == won_a.value.operator  # the answer survives a take-over
    assert current.token in {first.token, second.token}
    await b.finish(current)
    done = await a.insert(new_entry("t|k", _answer("eve")))
    assert done.done and not done.abandoned()


async def test_the_in_process_ledger_has_one_winner_and_one_take_over() -> None:
    store = MemoryLedger()
    await _race_and_take_over(store, store)


async def test_two_ledgers_on_one_sqlite_file_agree_on_one_winner(tmp_path: Path) -> None:
    db = tmp_path / "cp.sqlite"
    async with open_ledger(db) as a, open_ledger(db) as b:
        await a.get("warm", ClaimAnswer)  # a new file is switched to WAL once, not twice at once
        await _race_and_take_over(a, b)


@pytest.mark.parametrize("key", ["x|1", "x|2"])
async def test_entries_of_different_keys_do_not_interfere(key: str) -> None:
    store = MemoryLedger()
    mine = new_entry(key, _answer("ana"))
    assert (await store.insert(mine)).token == mine.token
    other = new_entry(key + "b", _answer("bo"))
    assert (await store.insert(other)).token == other.token


def test_peek_reads_an_entry_and_creates_no_table(tmp_path: Path) -> None:
    """The read-only paths (``algenta-graph escalations``) peek: a database without the
    ledger's table gets none, and a written key reads the same as ``get``."""
    db = tmp_path / "checkpoints.sqlite"
    sqlite3.connect(db).close()

    def tables() -> set[str]:
        with sqlite3.connect(db) as conn:
            return {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}

    async def go() -> None:
        async with open_ledger(db) as store:
            assert await store.peek("k", ClaimAnswer) is None
            assert tables() == set()  # peeking wrote nothing
            mine = new_entry("k", ANSWER)
            await store.insert(mine)
        async with open_ledger(db) as again:
            found = await again.peek("k", ClaimAnswer)  # the table exists, it is not made here
            assert found is not None and (found.token, found.value) == (mine.token, ANSWER)
            assert await again.peek("other", ClaimAnswer) is None
        memory = MemoryLedger()
        assert await memory.peek("k", ClaimAnswer) is None
        await memory.insert(mine)
        assert await memory.peek("k", ClaimAnswer) == mine

    asyncio.run(go())


@pytest.mark.parametrize("where", ["memory", "sqlite"])
def test_refresh_moves_only_the_live_unfinished_entry_of_its_token(
    where: str, tmp_path: Path
) -> None:
    async def go(store: Ledger) -> None:
        mine = dataclasses.replace(new_entry("k", ANSWER), at=1.0)
        await store.insert(mine)
        await store.refresh(dataclasses.replace(new_entry("k", ANSWER), at=1.0))  # not mine
        assert (await store.get("k", ClaimAnswer)).at == 1.0  # type: ignore[union-attr]
        await store.refresh(new_entry("absent", ANSWER))  # nothing to refresh: no error
        assert await store.get("absent", ClaimAnswer) is None
        await store.refresh(mine)
        moved = await store.get("k", ClaimAnswer)
        assert moved is not None and moved.at > 1.0 and moved.token == mine.token
        await store.finish(mine)
        finished = await store.get("k", ClaimAnswer)
        assert finished is not None and finished.done
        frozen = finished.at
        await store.refresh(mine)  # a finished entry keeps its time
        assert (await store.get("k", ClaimAnswer)).at == frozen  # type: ignore[union-attr]

    async def run() -> None:
        if where == "memory":
            await go(MemoryLedger())
            return
        async with open_ledger(tmp_path / "c.sqlite") as store:
            await go(store)

    asyncio.run(run())


# ---------------------------------------------------------------------------------------------
# choosing and opening a ledger


def test_a_configured_ledger_wins_then_the_implied_one_then_a_declared_single_process() -> None:
    assert choose_ledger("a.sqlite", implied="b.sqlite", deployment="d") == "a.sqlite"
    assert choose_ledger(None, implied="b.sqlite", deployment="d") == "b.sqlite"
    assert choose_ledger(Path(" c.sqlite"), implied=None, deployment="d") == "c.sqlite"
    memory = MemoryLedger()
    assert choose_ledger(memory, implied=MEMORY, deployment="d") is memory
    assert choose_ledger(None, implied=None, deployment="d", single_process=True) == MEMORY
    # single_process never overrides a shared ledger the deployment names
    assert choose_ledger(None, implied="b.sqlite", deployment="d", single_process=True) == (
        "b.sqlite"
    )
    with pytest.raises(ValueError, match="ledger must be"):
        choose_ledger("  ", implied=None, deployment="d")


def test_without_a_shared_ledger_the_refusal_names_the_deployment_and_what_to_set() -> None:
    with pytest.raises(LedgerRequired) as refused:
        choose_ledger(None, implied=None, deployment="the checkpointer MySaver")
    message = str(refused.value)
    assert message.startswith("the checkpointer MySaver: no ledger that every process")
    for named in ("ledger=", 'ledger = "..."', "ALGENTA_LEDGER", "single_process=True"):
        assert named in message
    assert "ALGENTA_SINGLE_PROCESS=1" in message
    assert refused.value.deployment == "the checkpointer MySaver"
    assert isinstance(refused.value, ValueError)


async def test_open_ledger_opens_what_a_spec_names(tmp_path: Path) -> None:
    async with open_ledger(MEMORY) as memory:
        assert memory is process_ledger()
    mine = MemoryLedger()
    async with open_ledger(mine) as given:
        assert given is mine  # the caller's, used as it is
    async with open_ledger(tmp_path / "x.sqlite") as sqlite:
        assert isinstance(sqlite, SqliteLedger)
        await sqlite.insert(new_entry("k", ANSWER))
    assert (tmp_path / "x.sqlite").is_file()
    with pytest.raises(LedgerError, match=r"cannot open the ledger in the SQLite file"):
        async with open_ledger(tmp_path / "no-such-dir" / "x.sqlite"):
            pass
    with pytest.raises(CheckpointerURLError, match="not a valid PostgreSQL URL"):
        async with open_ledger("postgresql://u:pw@[::1"):
            pass
    assert describe_ledger("postgresql://u:pw@h/db?password=x") == "postgresql://u:***@h/db"
    assert describe_ledger(tmp_path / "x.sqlite") == str(tmp_path / "x.sqlite")
    assert describe_ledger(mine) == mine.where
