"""Taking over an escalation's claim (``nodes/claiming.py``; ``docs/ARCHITECTURE.md``,
invariant 12): a finished claim is completed again as it is, an abandoned one is taken over in
its operator's name by this process, a live one names who decides and changes nothing."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import socket
import time

import pytest

from algenta_graph.errors import EscalationAlreadyDecided
from algenta_graph.governance.claims import ClaimStore, new_claim, release
from algenta_graph.nodes.claiming import adopt

ANSWER = {"operator": "ana", "decisions": [{"action": "override", "reason": "ok"}]}


def test_a_finished_claim_is_completed_again_as_it_is() -> None:
    store = ClaimStore()
    done = dataclasses.replace(new_claim("k", ANSWER), done=True)
    assert asyncio.run(adopt(store, done)) is done


def test_an_abandoned_claim_is_taken_over_keeping_its_key_and_answer() -> None:
    async def go() -> None:
        store = ClaimStore()
        gone = dataclasses.replace(new_claim("k", ANSWER), pid=2**22 + 7, at=time.time() - 3600)
        release(gone)
        await store.claim(gone)
        before = time.time()
        mine = await adopt(store, gone)
        assert (mine.key, mine.answer, mine.done) == ("k", ANSWER, False)
        assert mine.token != gone.token
        assert (mine.host, mine.pid) == (socket.gethostname(), os.getpid())
        assert mine.at >= before
        held = await store.get("k")
        assert held is not None and (held.token, held.answer) == (mine.token, ANSWER)

    asyncio.run(go())


def test_a_live_claim_names_its_operator_and_is_left_alone() -> None:
    async def go() -> None:
        store = ClaimStore()
        live = new_claim("k", ANSWER)
        await store.claim(live)
        with pytest.raises(EscalationAlreadyDecided, match="ana"):
            await adopt(store, live)
        assert await store.get("k") == live
        release(live)

    asyncio.run(go())
