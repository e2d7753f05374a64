"""Every call a rule names is written ahead, in the whole graph (``nodes/governed_tool.py``,
``nodes/write_ahead.py``; ``docs/ARCHITECTURE.md``, invariant 18), over a scripted CRM.

- a budgeted call whose run is cancelled while the tool runs, then a new message: the
  unfinished step is finished without sending it again; its ``tool_calls`` record says
  ``unknown`` and counts, the model is told, and the next call meets the budget;
- a call that ran, its step replayed from a checkpoint before it (as a lost checkpoint would):
  its recorded outcome is reused, nothing is sent again;
- a tool no rule names is not written ahead (nothing in the ledger).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest
from gated_stub import CrmStub
from langchain_core.messages import ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from algenta_graph.governance.tool_gates import Budget, ToolGates
from algenta_graph.graph import create_governed_agent
from algenta_graph.ledger import CallOutcome, CallStart, MemoryLedger
from algenta_graph.testing import ScriptedChatModel

REFUND = {"account_id": "a1", "amount": 5}
GATES = ToolGates(budgets=[Budget(tool="crm.refund", thread_limit=1)])


def refund_call(call_id: str) -> dict[str, Any]:
    return {"content": "", "tool_calls": [{"name": "refund", "args": REFUND, "id": call_id}]}


class SlowCrm(CrmStub):
    """The scripted CRM, whose ``refund`` waits for ``release`` (a call in flight)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()

    async def call_tool(self, name: str, args: Mapping[str, Any], *, tool_call_id: str) -> Any:
        if name == "refund":
            self.crm_calls.append((name, dict(args)))
            await self.release.wait()
        return await super().call_tool(name, args, tool_call_id=tool_call_id)


async def graph_over(conn: Any, replies: list[Any], ledger: MemoryLedger) -> Any:
    return await create_governed_agent(
        ScriptedChatModel(replies=replies),
        connection=conn,
        checkpointer=InMemorySaver(),
        ledger=ledger,
        tool_gates=GATES,
    )


def config(thread: str = "t") -> Any:
    return {"configurable": {"thread_id": thread}}


def refunds(conn: CrmStub) -> int:
    return sum(1 for name, _ in conn.crm_calls if name == "refund")


async def test_a_budgeted_call_cancelled_in_flight_is_never_sent_again_and_counts() -> None:
    conn, ledger = SlowCrm(), MemoryLedger()
    graph = await graph_over(
        conn, [refund_call("c1"), "what happened", refund_call("c2"), "no"], ledger
    )
    run = asyncio.ensure_future(graph.ainvoke({"messages": [("user", "refund a1")]}, config()))
    while not refunds(conn):
        await asyncio.sleep(0.01)
    run.cancel()  # cancelled while the CRM runs it
    with pytest.raises(asyncio.CancelledError):
        await run
    assert (await graph.aget_state(config())).next == ("governed_tool",)
    conn.release.set()  # what the CRM does now, nobody hears
    out = await graph.ainvoke({"messages": [("user", "what happened?")]}, config())
    assert refunds(conn) == 1  # the unfinished step was finished without sending it again
    [counted] = out["tool_calls"]
    assert (counted["tool"], counted["result"]) == ("refund", "unknown")
    [told] = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert str(told.content).startswith("UNKNOWN OUTCOME: the call of refund was started at ")
    assert "Do not call it again" in str(told.content) and told.status == "error"
    later = await graph.ainvoke({"messages": [("user", "refund a1 again")]}, config())
    assert refunds(conn) == 1
    assert [d["gate"] for d in later["denials"]] == ["budget"]  # the unknown call counts


async def test_a_call_that_ran_replayed_from_before_it_reuses_its_recorded_outcome() -> None:
    conn, ledger = CrmStub(), MemoryLedger()
    graph = await graph_over(conn, [refund_call("c1"), "refunded", "refunded again"], ledger)
    await graph.ainvoke({"messages": [("user", "refund a1")]}, config())
    assert refunds(conn) == 1
    history = [s async for s in graph.aget_state_history(config())]
    before = next(s for s in history if s.next == ("governed_tool",))
    async for _ in graph.astream(None, before.config):  # the step again, its checkpoint "lost"
        pass
    assert refunds(conn) == 1
    replayed = (await graph.aget_state(config())).values
    [answer] = [m for m in replayed["messages"] if isinstance(m, ToolMessage)]
    assert answer.status == "success" and '"tool": "refund"' in str(answer.content)
    assert [c["result"] for c in replayed["tool_calls"]] == ["executed"]
    [result] = [e for e in ledger._entries.values() if isinstance(e.value, CallOutcome)]
    assert result.value.result == "executed"


async def test_a_tool_no_rule_names_is_not_written_ahead() -> None:
    conn, ledger = CrmStub(), MemoryLedger()
    lookup = {
        "content": "",
        "tool_calls": [{"name": "lookup_customer", "args": {"account_id": "a1"}, "id": "c1"}],
    }
    graph = await graph_over(conn, [lookup, "found"], ledger)
    out = await graph.ainvoke({"messages": [("user", "look a1 up")]}, config())
    assert out["tool_calls"] == [] and conn.crm_calls == [("lookup_customer", {"account_id": "a1"})]
    assert not [e for e in ledger._entries.values() if isinstance(e.value, CallStart)]
