"""Taking over an escalation's claim (``nodes/claiming.py``; ``docs/ARCHITECTURE.md``,
invariant 12): a finished claim is completed again as it is, an abandoned one is taken over in
its operator's name by this process, a live one names who decides and changes nothing; a claim
lost to another answer says so; a resume's answer that lost is reported to its run."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import socket
import time
from typing import Any

import pytest

from algenta_graph.errors import EscalationAlreadyDecided
from algenta_graph.ledger import (
    AnswerDecision,
    ClaimAnswer,
    MemoryLedger,
    new_entry,
    release,
)
from algenta_graph.nodes.claiming import (
    ANSWER_REPORT,
    AnswerReport,
    adopt,
    claim_answer,
    report_lost,
)

ANSWER = ClaimAnswer(
    operator="ana",
    decisions=[AnswerDecision(action="override", type="approve", verdict="approved", reason="ok")],
)


def test_a_finished_claim_is_completed_again_as_it_is() -> None:
    store = MemoryLedger()
    done = dataclasses.replace(new_entry("k", ANSWER), done=True)
    assert asyncio.run(adopt(store, done)) is done


def test_an_abandoned_claim_is_taken_over_keeping_its_key_and_answer() -> None:
    async def go() -> None:
        store = MemoryLedger()
        gone = dataclasses.replace(new_entry("k", ANSWER), pid=2**22 + 7, at=time.time() - 3600)
        release(gone)
        await store.insert(gone)
        before = time.time()
        mine = await adopt(store, gone)
        assert (mine.key, mine.value, mine.done) == ("k", ANSWER, False)
        assert mine.token != gone.token
        assert (mine.host, mine.pid) == (socket.gethostname(), os.getpid())
        assert mine.at >= before
        held = await store.get("k", ClaimAnswer)
        assert held is not None and (held.token, held.value) == (mine.token, ANSWER)

    asyncio.run(go())


def test_a_live_claim_names_its_operator_and_is_left_alone() -> None:
    async def go() -> None:
        store = MemoryLedger()
        live = new_entry("k", ANSWER)
        await store.insert(live)
        with pytest.raises(EscalationAlreadyDecided, match="ana"):
            await adopt(store, live)
        assert await store.get("k", ClaimAnswer) == live
        release(live)

    asyncio.run(go())


def test_claiming_says_whether_the_claim_in_force_is_this_answers() -> None:
    async def go() -> None:
        store = MemoryLedger()
        first, mine = await claim_answer(store, "k", ANSWER)
        assert mine and first.value == ANSWER
        await store.finish(first)
        release(first)
        bo = ANSWER.model_copy(update={"operator": "bo"})
        second, mine = await claim_answer(store, "k", bo)
        assert not mine and second.token == first.token and second.value.operator == "ana"

    asyncio.run(go())


def test_a_lost_answer_is_reported_only_for_the_escalations_the_resume_may_answer() -> None:
    claim = dataclasses.replace(new_entry("k", ANSWER), done=True)
    report = AnswerReport(frozenset({"esc_1"}))
    config: Any = {"configurable": {ANSWER_REPORT: report}}
    report_lost(config, ["esc_2"], claim)  # another escalation: not this resume's
    assert report.lost_to is None
    report_lost(config, ["esc_1", "esc_3"], claim)
    assert report.lost_to is claim
    other = dataclasses.replace(claim, token="other")
    report_lost(config, ["esc_1"], other)  # the first answer it lost to is the one named
    assert report.lost_to is claim
    report_lost({"configurable": {}}, ["esc_1"], claim)  # a run carrying no answer: nothing


def test_a_served_run_retried_by_its_server_completes_its_own_answer_and_is_not_told() -> None:
    mine = dataclasses.replace(
        new_entry("k", ANSWER.model_copy(update={"run_id": "run-1"})), done=True
    )
    report = AnswerReport(frozenset({"esc_1"}))
    retried: Any = {"configurable": {ANSWER_REPORT: report, "run_id": "run-1"}}
    report_lost(retried, ["esc_1"], mine)
    assert report.lost_to is None
    another: Any = {"configurable": {ANSWER_REPORT: report, "run_id": "run-2"}}
    report_lost(another, ["esc_1"], mine)
    assert report.lost_to is mine
