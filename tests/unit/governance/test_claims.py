"""One answer per escalation: the claim stores (``docs/ARCHITECTURE.md``, invariant 10).

The in-process store, and the SQLite one in a real checkpoint file shared by two savers (what
two processes on one file see). A claim is won once; an abandoned claim (its process is gone)
is taken over by compare-and-set exactly once, keeping the winner's answer. Racing operators
in two processes: ``tests/guarantees/test_governance_race.py``.
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
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from algenta_graph.errors import EscalationAlreadyDecided
from algenta_graph.governance import claims as claims_module
from algenta_graph.governance.claims import (
    HEARTBEAT_SECONDS,
    LEASE_SECONDS,
    Claim,
    ClaimStore,
    claims_for,
    escalation_key,
    new_claim,
    release,
)

ANSWER = {"operator": "ana", "decisions": [{"action": "override", "reason": "ok"}]}


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_new_claim_names_this_process_and_a_fresh_token() -> None:
    before = time.time()
    claim = new_claim("k", ANSWER)
    assert (claim.key, claim.answer, claim.host, claim.pid) == (
        "k",
        ANSWER,
        socket.gethostname(),
        os.getpid(),
    )
    assert before <= claim.at <= time.time() and claim.done is False
    assert len(claim.token) == 32 and new_claim("k", ANSWER).token != claim.token
    assert claim.operator == "ana" and claim.summary == "override"
    empty = Claim("k", {}, "t", "h", 1, 0.0)
    assert (empty.operator, empty.summary) == ("?", "?")
    two = Claim("k", {"decisions": [{"action": "decline"}, {}]}, "t", "h", 1, 0.0)
    assert two.summary == "decline, None"


def test_who_counts_as_having_abandoned_a_claim() -> None:
    now = time.time()
    mine = new_claim("k", ANSWER)
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
    # this process let go of its claim without finishing it (its run was cancelled): abandoned
    # at once, whatever the lease says; finished, never
    release(mine)
    assert mine.abandoned(now)
    assert not dataclasses.replace(mine, done=True).abandoned(now)
    assert not new_claim("k", ANSWER).abandoned(now)


def test_abandoned_when_the_pid_cannot_be_signalled_relies_on_the_lease(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(pid: int, sig: int) -> None:
        raise PermissionError

    monkeypatch.setattr("algenta_graph.governance.claims.os.kill", refuse)
    claim = dataclasses.replace(new_claim("k", ANSWER), pid=1)
    assert not claim.abandoned(claim.at)
    assert claim.abandoned(claim.at + LEASE_SECONDS + 1)


def test_already_decided_names_the_winner_where_and_whether_it_is_still_applied() -> None:
    error = EscalationAlreadyDecided(new_claim("k", ANSWER))
    assert str(error) == (
        "escalation already decided by ana (override, still being applied); that answer takes "
        "effect, and nothing was done or recorded in this resume's name"
    )
    done = dataclasses.replace(new_claim("k", {**ANSWER, "thread_id": "t9"}), done=True)
    assert str(EscalationAlreadyDecided(done)) == (
        "escalation already decided by ana (override in thread t9); that answer takes effect, "
        "and nothing was done or recorded in this resume's name"
    )
    # shown to API clients by the LangGraph server (it masks other exceptions' messages)
    assert isinstance(error, RuntimeError)


async def exercise(store: ClaimStore, other: ClaimStore) -> None:
    """The claim protocol, with ``other`` a second view of the same claims."""
    first = dataclasses.replace(new_claim("k1", ANSWER), at=time.time() - 100)
    second = new_claim("k1", {"operator": "bo", "decisions": []})
    assert await store.get("k1") is None and await other.get("k1") is None
    assert await store.claim(first) == first
    seen = await other.get("k1")  # read, never written
    assert seen is not None and (seen.token, seen.answer) == (first.token, ANSWER)
    # a refresh moves only the live claimant's "at"
    await other.refresh(second)
    assert (await store.get("k1")).at == pytest.approx(first.at)  # type: ignore[union-attr]
    await other.refresh(first)
    refreshed = await store.get("k1")
    assert refreshed is not None and refreshed.token == first.token
    assert refreshed.at > first.at + 99  # now, not 100 s ago
    held = await other.claim(second)  # the first claim wins, seen from anywhere
    assert (held.token, held.operator, held.done) == (first.token, "ana", False)
    # take over only the claim in force, keeping its answer
    third = new_claim("k1", {"operator": "cy", "decisions": []})
    assert not await other.take_over(second, third)
    assert await other.take_over(first, third)
    adopted = await store.claim(new_claim("k1", {}))
    assert (adopted.token, adopted.answer, adopted.host, adopted.pid) == (
        third.token,
        ANSWER,
        third.host,
        third.pid,
    )
    assert adopted.at == pytest.approx(third.at)
    # finish: only by the claim's token
    await store.finish(first)
    assert (await other.claim(new_claim("k1", {}))).done is False
    await store.finish(adopted)
    finished = await other.claim(new_claim("k1", {}))
    assert finished.done is True
    at = finished.at
    await store.refresh(adopted)  # a finished claim is never refreshed
    assert (await other.get("k1")).at == pytest.approx(at)  # type: ignore[union-attr]
    assert (finished.key, finished.answer, finished.token, finished.host, finished.pid) == (
        "k1",
        ANSWER,
        third.token,
        third.host,
        third.pid,
    )
    assert finished.at >= third.at
    # other keys are independent; finishing an unknown key does nothing
    assert (await store.claim(second_key := new_claim("k2", ANSWER))).token == second_key.token
    await store.finish(new_claim("k3", ANSWER))
    assert not await store.take_over(new_claim("k3", ANSWER), new_claim("k3", ANSWER))


def test_the_in_process_store() -> None:
    store = ClaimStore()
    asyncio.run(exercise(store, store))


async def finished_then_taken_over(store: ClaimStore) -> bool:
    claim = new_claim("k", ANSWER)
    await store.claim(claim)
    await store.finish(claim)
    return await store.take_over(claim, new_claim("k", {}))


def test_a_finished_claim_is_never_taken_over_in_sqlite(tmp_path: Path) -> None:
    async def go() -> bool:
        async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "c.sqlite")) as saver:
            return await finished_then_taken_over(claims_for(saver))

    assert asyncio.run(go()) is False


def test_a_finished_claim_is_never_taken_over_in_process() -> None:
    assert asyncio.run(finished_then_taken_over(ClaimStore())) is False


def test_the_sqlite_store_is_shared_through_the_checkpoint_file(tmp_path: Path) -> None:
    async def go() -> None:
        db = str(tmp_path / "checkpoints.sqlite")
        async with (
            AsyncSqliteSaver.from_conn_string(db) as one,
            AsyncSqliteSaver.from_conn_string(db) as two,
        ):
            store, other = claims_for(one), claims_for(two)
            assert type(store).__name__ == "_SqliteClaims" and store is not other
            assert claims_for(one) is store  # one store per saver
            await exercise(store, other)

    asyncio.run(go())


def test_claims_for_other_savers() -> None:
    memory = InMemorySaver()
    store = claims_for(memory)
    assert type(store) is ClaimStore and claims_for(memory) is store
    assert claims_for(InMemorySaver()) is not store
    process = claims_for(None)
    assert type(process) is ClaimStore and claims_for(None) is process

    class Slotted:
        __slots__ = ()  # not weak-referenceable

    assert claims_for(Slotted()) is process


def test_a_postgres_saver_gets_the_postgres_store() -> None:
    class AsyncPostgresSaver:  # named like the real one; never connected in this test
        pass

    saver = AsyncPostgresSaver()
    store: Any = claims_for(saver)
    assert type(store).__name__ == "_PostgresClaims" and store.saver is saver


class Locked:
    """Stands in for a claim store's ``_exec_once``: fails ``times`` times with ``error``, then
    runs the real statement; and for ``asyncio`` in claims.py (its sleeps are recorded)."""

    def __init__(self, store: Any, times: int, error: str = "database is locked") -> None:
        self.real = store._exec_once
        self.times = times
        self.error = error
        self.attempts = 0
        self.sleeps: list[float] = []
        self.rollbacks = 0
        store._exec_once = self.exec_once
        real_rollback = store.saver.conn.rollback

        async def rollback() -> None:
            self.rollbacks += 1
            await real_rollback()

        store.saver.conn.rollback = rollback

    async def exec_once(self, sql: str, params: tuple[Any, ...]) -> Any:
        self.attempts += 1
        if self.attempts <= self.times:
            raise sqlite3.OperationalError(self.error)
        return await self.real(sql, params)

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)


def locked_claim(tmp_path: Path, monkeypatch: Any, times: int, error: str) -> tuple[Any, Locked]:
    async def go() -> tuple[Any, Locked]:
        async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "c.sqlite")) as saver:
            store = claims_for(saver)
            locked = Locked(store, times, error)
            monkeypatch.setattr(claims_module, "asyncio", locked)
            try:
                return await store.claim(new_claim("k", ANSWER)), locked
            except sqlite3.OperationalError as exc:
                return exc, locked

    return asyncio.run(go())


def test_a_locked_claim_table_is_tried_again_after_a_rollback(
    tmp_path: Path, monkeypatch: Any
) -> None:
    claim, locked = locked_claim(tmp_path, monkeypatch, 3, "database is locked")
    assert isinstance(claim, Claim) and claim.answer == ANSWER
    assert (locked.attempts, locked.rollbacks) == (5, 3)  # 3 locked, the INSERT, the SELECT
    assert locked.sleeps == pytest.approx([0.05, 0.1, 0.15])


def test_a_claim_table_locked_for_good_fails_after_the_last_try(
    tmp_path: Path, monkeypatch: Any
) -> None:
    error, locked = locked_claim(tmp_path, monkeypatch, 100, "database table is locked")
    assert isinstance(error, sqlite3.OperationalError)
    assert str(error) == "database table is locked"
    assert (locked.attempts, locked.rollbacks) == (20, 19)
    assert locked.sleeps == pytest.approx([0.05 * n for n in range(1, 20)])


def test_any_other_database_error_is_raised_at_once(tmp_path: Path, monkeypatch: Any) -> None:
    error, locked = locked_claim(tmp_path, monkeypatch, 1, "no such table: x")
    assert isinstance(error, sqlite3.OperationalError) and str(error) == "no such table: x"
    assert (locked.attempts, locked.rollbacks, locked.sleeps) == (1, 0, [])


def test_the_escalation_key_is_the_sorted_identities() -> None:
    assert escalation_key(["esc_2", "esc_1"]) == escalation_key(("esc_1", "esc_2"))
    assert escalation_key(["esc_1"]) == "escalations:esc_1"
    assert escalation_key(["esc_1"]) != escalation_key(["esc_1", "esc_2"])


# ---------------------------------------------------------------------------------------------
# two stores racing on one escalation, then a take-over


def _answer(operator: str) -> dict[str, object]:
    return {"operator": operator, "decisions": [{"action": "override", "reason": "ok"}]}


async def _race_and_take_over(a: ClaimStore, b: ClaimStore) -> None:
    mine, theirs = new_claim("t|k", _answer("ana")), new_claim("t|k", _answer("bo"))
    won_a, won_b = await asyncio.gather(a.claim(mine), b.claim(theirs))
    # both see the same single winner
    assert won_a.token == won_b.token and won_a.token in {mine.token, theirs.token}
    assert not won_a.abandoned()  # its process (this one) is alive
    # the winner's process dies before finishing: the claim may be taken over, once
    dead = replace(won_a, pid=dead_pid())
    assert dead.abandoned()
    stale = replace(won_a, token="not-the-claimants")
    assert not await a.take_over(stale, new_claim("t|k", _answer("cy")))  # a stale view: refused
    if isinstance(a, ClaimStore) and type(a) is ClaimStore:
        a._claims["t|k"] = dead  # the in-process store: plant the dead claimant
    else:
        await a._exec(  # type: ignore[attr-defined]
            "UPDATE algenta_escalation_claims SET pid = ? WHERE key = ?", (dead.pid, "t|k")
        )
    first, second = new_claim("t|k", _answer("cy")), new_claim("t|k", _answer("di"))
    took = await asyncio.gather(a.take_over(dead, first), b.take_over(dead, second))
    assert sorted(took) == [False, True]
    current = await a.claim(new_claim("t|k", _answer("eve")))
    assert current.operator == won_a.operator  # the winner's answer survives a take-over
    assert current.token in {first.token, second.token}
    await b.finish(current)
    done = await a.claim(new_claim("t|k", _answer("eve")))
    assert done.done and not done.abandoned()


async def test_the_in_process_store_has_one_winner_and_one_take_over() -> None:
    store = claims_for(InMemorySaver())
    await _race_and_take_over(store, store)


async def test_two_savers_on_one_sqlite_file_agree_on_one_winner(tmp_path: Path) -> None:
    db = str(tmp_path / "cp.sqlite")
    async with (
        AsyncSqliteSaver.from_conn_string(db) as one,
        AsyncSqliteSaver.from_conn_string(db) as two,
    ):
        await one.setup()  # a new file is switched to WAL once, not by two connections at once
        await two.setup()
        a, b = claims_for(one), claims_for(two)
        assert a is not b and claims_for(one) is a
        await _race_and_take_over(a, b)


@pytest.mark.parametrize("key", ["x|1", "x|2"])
async def test_claims_on_different_escalations_do_not_interfere(key: str) -> None:
    store = claims_for(InMemorySaver())
    mine = new_claim(key, _answer("ana"))
    assert (await store.claim(mine)).token == mine.token
    other = new_claim(key + "b", _answer("bo"))
    assert (await store.claim(other)).token == other.token


def test_peek_reads_a_claim_and_creates_no_claim_table(tmp_path: Path) -> None:
    """The read-only paths (``algenta-graph escalations``, the inbox) peek: a checkpoint file
    without the claim table gets none, and a claimed key reads the same as ``get``."""
    db = tmp_path / "checkpoints.sqlite"

    def tables() -> set[str]:
        with sqlite3.connect(db) as conn:
            return {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}

    async def go() -> None:
        async with AsyncSqliteSaver.from_conn_string(str(db)) as saver:
            store = claims_for(saver)
            assert await store.peek("k") is None
            assert not any("claim" in t for t in tables())  # peeking wrote nothing
            mine = new_claim("k", ANSWER)
            await store.claim(mine)
        async with AsyncSqliteSaver.from_conn_string(str(db)) as again:
            fresh = claims_for(again)  # a new store: the table exists, it is not made here
            found = await fresh.peek("k")
            assert found is not None and (found.token, found.answer) == (mine.token, ANSWER)
            assert await fresh.peek("other") is None
        memory = ClaimStore()
        assert await memory.peek("k") is None
        await memory.claim(mine)
        assert await memory.peek("k") == mine

    asyncio.run(go())


@pytest.mark.parametrize("where", ["memory", "sqlite"])
def test_refresh_moves_only_the_live_unfinished_claim_of_its_token(
    where: str, tmp_path: Path
) -> None:
    async def go(store: ClaimStore) -> None:
        mine = dataclasses.replace(new_claim("k", ANSWER), at=1.0)
        await store.claim(mine)
        await store.refresh(dataclasses.replace(new_claim("k", ANSWER), at=1.0))  # not mine
        assert (await store.get("k")).at == 1.0  # type: ignore[union-attr]
        await store.refresh(new_claim("absent", ANSWER))  # nothing to refresh: no error
        assert await store.get("absent") is None
        await store.refresh(mine)
        moved = await store.get("k")
        assert moved is not None and moved.at > 1.0 and moved.token == mine.token
        await store.finish(mine)
        finished = await store.get("k")
        assert finished is not None and finished.done
        frozen = finished.at
        await store.refresh(mine)  # a finished claim keeps its time
        assert (await store.get("k")).at == frozen  # type: ignore[union-attr]

    async def run() -> None:
        if where == "memory":
            await go(ClaimStore())
            return
        async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "c.sqlite")) as saver:
            await go(claims_for(saver))

    asyncio.run(run())
