"""Every governed call written ahead (``nodes/write_ahead.py``; ``docs/ARCHITECTURE.md``,
invariant 18): sent at most once, its recorded outcome reused, a start without a result
``unknown`` and never sent again, a refusal decided once; on the in-process ledger, and two
completions at once on SQLite ledgers whose reads yield (PostgreSQL: ``tests/postgres/``)."""

from __future__ import annotations

import asyncio
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import ToolMessage

from algenta_graph.errors import AlgentaGraphError, LedgerError, ToolNotInProfileError
from algenta_graph.ledger import (
    CallOutcome,
    CallStart,
    Ledger,
    MemoryLedger,
    call_result_key,
    call_start_key,
    held_call_id,
    new_entry,
    open_ledger,
    step_call_id,
)
from algenta_graph.nodes.write_ahead import Ran, earlier_outcome, run_once

CALL = held_call_id("esc_1")


class _Tool:
    """A tool that answers one way, counts what it was sent, and may take its time."""

    def __init__(
        self, answer: Any = None, error: Exception | None = None, delay: float = 0.0
    ) -> None:
        self.sent: list[dict[str, Any]] = []
        self.answer = answer
        self.error = error
        self.delay = delay

    async def call(self, args: dict[str, Any]) -> ToolMessage:
        self.sent.append(args)
        await asyncio.sleep(self.delay)
        if self.error is not None:
            raise self.error
        return self.answer or ToolMessage(content='{"deleted": "a1"}', tool_call_id="x")


def _run(tool: _Tool, ledger: Ledger, identity: str = CALL, **options: Any) -> Ran:
    send = partial(tool.call, {"account_id": "a1"})
    return asyncio.run(run_once(ledger, identity, "delete_customer", send, **options))


def test_a_call_runs_once_and_a_second_completion_reuses_its_result() -> None:
    tool, ledger = _Tool(), MemoryLedger()
    first = _run(tool, ledger, operator="ana")
    again = _run(tool, ledger, operator="ana")
    assert tool.sent == [{"account_id": "a1"}]
    assert (first.outcome.result, first.outcome.status, first.outcome.content) == (
        "executed",
        "success",
        '{"deleted": "a1"}',
    )
    assert first.answer is not None  # this attempt sent it: the tool's own answer
    assert again.outcome == first.outcome and again.answer is None  # reused


def test_a_start_without_a_result_is_unknown_and_never_run_again() -> None:
    tool, ledger = _Tool(), MemoryLedger()
    start = CallStart(tool="delete_customer", started_at="T0", operator="ana")
    asyncio.run(ledger.insert(new_entry(call_start_key(CALL), start)))
    ran = _run(tool, ledger)
    assert tool.sent == [] and ran.answer is None
    outcome = ran.outcome
    assert (outcome.result, outcome.status, outcome.started_at) == ("unknown", "error", "T0")
    assert outcome.content == (
        "the approved call of delete_customer was started at T0 by an earlier attempt that "
        "stopped before its result was recorded; it may have run, so it was NOT run again: an "
        "operator must check the tool's own records"
    )
    # a call its rules let through (no approver) says "call"
    step = step_call_id("m1", "c1")
    asyncio.run(
        ledger.insert(new_entry(call_start_key(step), start.model_copy(update={"operator": None})))
    )
    assert _run(tool, ledger, step).outcome.content.startswith("the call of delete_customer was")
    assert tool.sent == []


def test_the_start_names_who_what_and_where_and_every_outcome_when_it_started() -> None:
    tool, ledger = _Tool(), MemoryLedger()
    outcome = _run(tool, ledger, operator="ana", thread_id="t1").outcome
    start = asyncio.run(ledger.get(call_start_key(CALL), CallStart))
    assert start is not None
    assert (start.value.operator, start.value.tool, start.value.thread_id) == (
        "ana",
        "delete_customer",
        "t1",
    )
    assert outcome.started_at == start.value.started_at
    recorded = asyncio.run(ledger.get(call_result_key(CALL), CallOutcome))
    assert recorded is not None and recorded.value == CallOutcome(
        result="executed",
        content='{"deleted": "a1"}',
        status="success",
        started_at=start.value.started_at,
        refused=False,
    )


def test_non_text_content_is_kept_as_json() -> None:
    blocks = ToolMessage(content=[{"type": "image", "url": "u"}], tool_call_id="x")
    outcome = _run(_Tool(answer=blocks), MemoryLedger()).outcome
    assert outcome.content == '[{"type": "image", "url": "u"}]'


def test_a_recorded_failure_reads_back_as_it_was_recorded() -> None:
    ledger = MemoryLedger()
    recorded = CallOutcome(result="failed", content="nope", status="error", started_at="T1")
    asyncio.run(ledger.insert(new_entry(call_result_key(CALL), recorded)))
    tool = _Tool()
    assert _run(tool, ledger).outcome == recorded and tool.sent == []


def test_a_tool_error_is_failed_a_lost_answer_unknown_a_refusal_failed() -> None:
    error = ToolMessage(content="nope", tool_call_id="x", status="error")
    failed = _run(_Tool(answer=error), MemoryLedger()).outcome
    assert (failed.result, failed.status, failed.content) == ("failed", "error", "nope")
    assert failed.started_at is not None
    lost = _run(_Tool(error=AlgentaGraphError("connection reset")), MemoryLedger()).outcome
    assert (lost.result, lost.status) == ("unknown", "error") and lost.started_at is not None
    assert lost.content == "the call may have run, its answer was lost: connection reset"
    not_sent = ToolNotInProfileError("delete_customer", "execute")
    refused = _run(_Tool(error=not_sent), MemoryLedger()).outcome
    assert (refused.result, refused.status) == ("failed", "error")
    assert refused.content.startswith("Error: ") and refused.started_at is not None


def test_a_call_cancelled_while_it_runs_is_unknown_to_every_later_attempt() -> None:
    """The run is cancelled (or killed) while the tool executes: no result is written, and the
    next attempt (a new message, a copy, another worker) never sends it again."""
    tool, ledger = _Tool(delay=30), MemoryLedger()

    async def go() -> None:
        task = asyncio.ensure_future(
            run_once(ledger, CALL, "delete_customer", partial(tool.call, {"a": 1}))
        )
        while not tool.sent:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert asyncio.run(ledger.get(call_result_key(CALL), CallOutcome)) is None
    again = _Tool()
    ran = _run(again, ledger)
    assert again.sent == [] and ran.outcome.result == "unknown"
    assert asyncio.run(earlier_outcome(ledger, CALL, "delete_customer")) == ran.outcome


def test_earlier_outcome_is_none_until_an_attempt_starts_the_call() -> None:
    ledger = MemoryLedger()
    assert asyncio.run(earlier_outcome(ledger, CALL, "delete_customer")) is None
    done = _run(_Tool(), ledger).outcome
    assert asyncio.run(earlier_outcome(ledger, CALL, "delete_customer")) == done


def test_a_damaged_entry_is_refused_by_name_and_nothing_is_sent() -> None:
    ledger = MemoryLedger()
    asyncio.run(
        ledger.insert(new_entry(call_result_key(CALL), CallStart(tool="x", started_at="T")))
    )
    tool = _Tool()
    with pytest.raises(LedgerError, match="holds a 'call-start' entry, not the CallOutcome"):
        _run(tool, ledger)
    assert tool.sent == []


def _refused(tool: _Tool, ledger: Ledger) -> Ran:
    return _run(tool, ledger, operator="ana", refused="spent")


def test_a_call_refused_when_it_is_to_run_is_not_run_and_the_refusal_is_decided_once() -> None:
    tool, ledger = _Tool(), MemoryLedger()
    outcome = _refused(tool, ledger).outcome
    assert tool.sent == []
    assert (outcome.result, outcome.status, outcome.content, outcome.refused) == (
        "failed",
        "error",
        "spent",
        True,
    )
    assert asyncio.run(ledger.get(call_start_key(CALL), CallStart)) is None  # never started
    # completed again (a copy of the thread, a resume after a crash): the same refusal, read
    # back, even if the budget no longer blocks it
    again = _run(tool, ledger)
    assert tool.sent == [] and again.outcome == outcome


def test_a_refusal_never_hides_a_call_that_ran_or_may_have() -> None:
    ran_ledger, tool = MemoryLedger(), _Tool()
    ran = _run(tool, ran_ledger)
    assert _refused(tool, ran_ledger).outcome == ran.outcome and not ran.outcome.refused
    started = MemoryLedger()
    start = CallStart(tool="delete_customer", started_at="T0")
    asyncio.run(started.insert(new_entry(call_start_key(CALL), start)))
    unknown = _refused(tool, started).outcome
    assert (unknown.result, unknown.refused) == ("unknown", False)
    assert tool.sent == [{"account_id": "a1"}]


def test_identities_are_one_per_call_and_never_shared_across_kinds() -> None:
    assert step_call_id("m1", "c1") == "call:m1:c1" != step_call_id("m2", "c1")
    assert held_call_id("esc_1") == "held:esc_1"
    assert call_start_key(CALL) != call_result_key(CALL)


async def _completions_at_once(one: Ledger, two: Ledger) -> tuple[list[Ran], _Tool]:
    tool = _Tool(delay=0.2)
    send = partial(tool.call, {"account_id": "a1"})
    results = await asyncio.gather(
        run_once(one, CALL, "delete_customer", send, operator="ana"),
        run_once(two, CALL, "delete_customer", send, operator="ana"),
    )
    return list(results), tool


def test_two_completions_at_once_on_two_sqlite_ledgers_run_the_call_once(tmp_path: Path) -> None:
    """Two completions of one held-call approval at once, each on its own connection to one
    file (the reads yield between the checks and the write): one sends, the other is told
    ``unknown`` (the call may be running elsewhere); never two sends."""

    async def go() -> tuple[list[Ran], _Tool]:
        db = tmp_path / "cp.sqlite"
        async with open_ledger(db) as one, open_ledger(db) as two:
            await one.get("warm", CallStart)
            return await _completions_at_once(one, two)

    results, tool = asyncio.run(go())
    assert len(tool.sent) == 1
    assert sorted(r.outcome.result for r in results) == ["executed", "unknown"]
