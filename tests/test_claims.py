"""One answer per escalation (``docs/ARCHITECTURE.md``, invariant 10): the claim stores.

Two savers on one SQLite file stand for two processes; the in-process store for the savers
that share no database. A claim is won once; an abandoned claim (its process is gone) is taken
over by compare-and-set exactly once, keeping the winner's answer.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from algenta_graph.governance.claims import ClaimStore, claims_for, new_claim


def _answer(operator: str) -> dict[str, object]:
    return {"operator": operator, "decisions": [{"action": "override", "reason": "ok"}]}


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


async def _race_and_take_over(a: ClaimStore, b: ClaimStore) -> None:
    mine, theirs = new_claim("t|k", _answer("ana")), new_claim("t|k", _answer("bo"))
    won_a, won_b = await asyncio.gather(a.claim(mine), b.claim(theirs))
    # both see the same single winner
    assert won_a.token == won_b.token and won_a.token in {mine.token, theirs.token}
    assert not won_a.abandoned()  # its process (this one) is alive
    # the winner's process dies before finishing: the claim may be taken over, once
    dead = replace(won_a, pid=_dead_pid())
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
