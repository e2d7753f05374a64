"""The record guard of the served graph (``algenta_graph.governance.record_guard``), in-process:
no ``update_state`` writes records, forks them away from an earlier checkpoint, updates as a
governance node, or replaces a pending escalation or an unfinished governed step
(``docs/ARCHITECTURE.md``, invariant 10). Through a real ``langgraph dev``:
``tests/served/test_auth.py``.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from served_support import user_turn

from algenta_graph.errors import RecordsWriteRefused
from algenta_graph.governance.record_guard import guard_records

# ---------------------------------------------------------------------------------------------
# the record guard


async def test_guarded_graph_refuses_update_state_on_records() -> None:
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import START, StateGraph

    from algenta_graph.state import GovernedState

    def node(state: GovernedState) -> dict[str, Any]:
        return {"receipts": [{"decision_id": "d1"}]}

    builder = StateGraph(GovernedState)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    graph = guard_records(builder.compile(checkpointer=InMemorySaver()))
    assert guard_records(graph) is graph
    config: Any = {"configurable": {"thread_id": "t"}}
    await graph.ainvoke({"messages": [{"role": "user", "content": "hi"}]}, config)
    forged: list[dict[str, Any]] = [
        {"receipts": [{"decision_id": "forged"}]},
        {"denials": []},
        {"operator_decisions": [{"operator": "mallory"}], "messages": []},
    ]
    for values in forged:
        with pytest.raises(Exception, match="refused") as caught:
            await graph.aupdate_state(config, values, as_node="node")
        assert getattr(caught.value, "status_code", 403) == 403
        with pytest.raises(Exception, match="refused"):
            graph.update_state(config, values, as_node="node")
    # forking an earlier checkpoint is refused too; a plain messages update is not
    first = [s async for s in graph.aget_state_history(config)][-1].config
    with pytest.raises(Exception, match="earlier checkpoint"):
        await graph.aupdate_state(first, {"messages": []}, as_node="node")
    await graph.aupdate_state(config, {"messages": []}, as_node="node")
    state = await graph.aget_state(config)
    assert [r["decision_id"] for r in state.values["receipts"]] == ["d1"]
    assert issubclass(RecordsWriteRefused, PermissionError)


def _governance_graph(**compile_options: Any) -> Any:
    """A small graph with the governed graph's node names: ``model`` asks for a tool when the
    user says "escalate" or "halt"; ``governed_tool`` then routes to the confidence handler
    (which interrupts for an operator and records the answer) or ends (a halt)."""
    from langchain_core.messages import AIMessage, ToolMessage
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt

    from algenta_graph.nodes.denial_handler import MODEL_NODE, handler_node_name
    from algenta_graph.state import GovernedState
    from algenta_graph.topology import GOVERNED_TOOL_NODE

    handler = handler_node_name("confidence")

    def model(state: GovernedState) -> dict[str, Any]:
        said = state["messages"][-1].content
        calls = [{"name": "execute_decision", "args": {}, "id": "c1"}]
        if said in ("escalate", "halt"):
            return {"messages": [AIMessage("", tool_calls=calls)]}
        return {"messages": [AIMessage("ok")]}

    def governed(state: GovernedState) -> dict[str, Any]:
        return {"messages": [ToolMessage("denied", tool_call_id="c1")]}

    def route(state: Any) -> str:
        return handler if state["messages"][-3].content == "escalate" else END

    def denial_handler(state: GovernedState) -> dict[str, Any]:
        answer = interrupt({"gate": "confidence"})
        return {"operator_decisions": [{"operator": answer["operator"], "tool_call_id": "c1"}]}

    builder = StateGraph(GovernedState)
    builder.add_node(MODEL_NODE, model)
    builder.add_node(GOVERNED_TOOL_NODE, governed)
    builder.add_node(handler, denial_handler)
    builder.add_edge(START, MODEL_NODE)
    builder.add_conditional_edges(
        MODEL_NODE,
        lambda s: GOVERNED_TOOL_NODE if getattr(s["messages"][-1], "tool_calls", None) else END,
        [GOVERNED_TOOL_NODE, END],
    )
    builder.add_conditional_edges(GOVERNED_TOOL_NODE, route, [handler, END])
    builder.add_edge(handler, END)
    return guard_records(builder.compile(checkpointer=InMemorySaver(), **compile_options))


async def test_guarded_graph_refuses_governance_nodes_and_updates_over_a_pending_escalation() -> (
    None
):
    from langgraph.types import Command

    from algenta_graph.topology import DENIAL_HANDLER_NODES, GOVERNANCE_NODES, GOVERNED_TOOL_NODE

    assert (GOVERNED_TOOL_NODE, *DENIAL_HANDLER_NODES) == GOVERNANCE_NODES
    handler = "denial_handler_confidence"
    assert handler in DENIAL_HANDLER_NODES
    graph = _governance_graph()

    def config(thread: str) -> Any:
        return {"configurable": {"thread_id": thread}}

    async def refused(thread: str, values: Any, as_node: str | None, needle: str) -> None:
        with pytest.raises(Exception, match=re.escape(needle)) as caught:
            await graph.aupdate_state(config(thread), values, as_node=as_node)
        assert getattr(caught.value, "status_code", 403) == 403
        with pytest.raises(Exception, match=re.escape(needle)):
            graph.update_state(config(thread), values, as_node=as_node)

    note = {"messages": [{"role": "user", "content": "note"}]}
    # an idle thread: the owner's messages update works (named, or inferred: the model)...
    await graph.ainvoke(user_turn("hi"), config("idle"))
    await graph.aupdate_state(config("idle"), note)
    await graph.aupdate_state(config("idle"), note, as_node="model")
    # ...but never as a governance node
    for node in GOVERNANCE_NODES:
        await refused("idle", note, node, f"as {node!r} is refused: it is a governance node")

    # a pending escalation: no update at all, for anyone, until an operator resumes
    await graph.ainvoke(user_turn("escalate"), config("esc"))
    before = await graph.aget_state(config("esc"))
    assert before.next == (handler,) and before.tasks[0].interrupts
    for values, as_node in (
        ({"messages": []}, handler),
        ({"messages": []}, GOVERNED_TOOL_NODE),
        (note, "model"),
        (note, None),
        (None, "__end__"),  # clears the pending tasks
        (note, "__input__"),
    ):
        needle = "governance node" if as_node in GOVERNANCE_NODES else "pending escalation"
        await refused("esc", values, as_node, needle)
    with pytest.raises(Exception, match="pending escalation"):
        await graph.abulk_update_state(
            config("esc"), [[("model", None)], [({"messages": []}, "model")]]
        )
    after = await graph.aget_state(config("esc"))
    assert (after.next, after.values) == (before.next, before.values)
    assert after.tasks[0].interrupts == before.tasks[0].interrupts
    # the operator's resume still answers it, once
    await graph.ainvoke(Command(resume={"operator": "ana"}), config("esc"))
    done = await graph.aget_state(config("esc"))
    assert done.next == () and done.values["operator_decisions"] == [
        {"operator": "ana", "tool_call_id": "c1"}
    ]
    await graph.aupdate_state(config("esc"), note, as_node="model")

    # a run that halted in governed_tool: an update without as_node would be attributed to it
    await graph.ainvoke(user_turn("halt"), config("halt"))
    await refused("halt", note, None, f"the last node that ran, {GOVERNED_TOOL_NODE!r}")
    await graph.aupdate_state(config("halt"), note, as_node="model")

    # a governed step that is due (not yet run): no update may replace it
    paused = _governance_graph(interrupt_before=[GOVERNED_TOOL_NODE])
    await paused.ainvoke(user_turn("escalate"), config("due"))
    assert (await paused.aget_state(config("due"))).next == (GOVERNED_TOOL_NODE,)
    with pytest.raises(Exception, match="governed step is unfinished"):
        await paused.aupdate_state(config("due"), note, as_node="model")


async def test_guarded_graph_reads_commands_and_copies_in_an_update() -> None:
    """An update's values may be a Command (a bulk update's ``command``) or, as ``__copy__``,
    a list of ``(values, as_node)`` pairs: the guard reads inside both."""
    from langgraph.types import Command, Send, StateUpdate

    from algenta_graph.topology import GOVERNED_TOOL_NODE

    graph = _governance_graph()
    config: Any = {"configurable": {"thread_id": "idle"}}
    await graph.ainvoke(user_turn("hi"), config)
    before = await graph.aget_state(config)
    forged = {"operator_decisions": [{"operator": "mallory", "tool_call_id": "c1"}]}
    for values, as_node, needle in (
        (Command(update=forged), "model", "governed records (operator_decisions)"),
        (Command(update=[("receipts", [{}])]), "model", "governed records (receipts)"),
        ([Command(update={"denials": []})], "model", "governed records (denials)"),
        (Command(goto=GOVERNED_TOOL_NODE), "model", f"{GOVERNED_TOOL_NODE!r}"),
        (Command(goto=[Send("denial_handler_confidence", {})]), "model", "governance node"),
        (Command(resume={"operator": "mallory"}), "model", "operator's resume"),
        ([[forged, "model"]], "__copy__", "governed records (operator_decisions)"),
        ([[{"messages": []}, GOVERNED_TOOL_NODE]], "__copy__", "governance node"),
    ):
        with pytest.raises(Exception, match=re.escape(needle)):
            # StateUpdate is annotated dict; LangGraph takes Commands and __copy__ lists too
            await graph.abulk_update_state(config, [[StateUpdate(values, as_node)]])  # type: ignore[arg-type]
        with pytest.raises(Exception, match=re.escape(needle)):
            graph.bulk_update_state(config, [[StateUpdate(values, as_node)]])  # type: ignore[arg-type]
    after = await graph.aget_state(config)
    assert (after.values, after.next) == (before.values, before.next)
    # a command that only writes messages, and a copy of the latest checkpoint, still work
    await graph.abulk_update_state(
        config,
        [[StateUpdate(Command(update={"messages": []}), "model")]],  # type: ignore[arg-type]
    )
    await graph.abulk_update_state(
        config,
        [[StateUpdate([[{"messages": []}, "model"]], "__copy__")]],  # type: ignore[arg-type]
    )
    assert (await graph.aget_state(config)).values["operator_decisions"] == []


async def test_each_refusal_says_exactly_why_and_an_allowed_update_is_applied_both_ways() -> None:
    """The words an operator or a client reads (the served API shows them as a 403), and the
    sync ``update_state`` path applying what it does not refuse."""
    from dataclasses import dataclass

    from langgraph.types import Command, StateUpdate

    from algenta_graph.topology import GOVERNED_TOOL_NODE

    graph = _governance_graph()

    def config(thread: str) -> Any:
        return {"configurable": {"thread_id": thread}}

    def refusal(thread: str, values: Any, as_node: str | None = "model") -> str:
        with pytest.raises(RecordsWriteRefused) as sync:
            graph.update_state(config(thread), values, as_node=as_node)
        return str(sync.value)

    await graph.ainvoke(user_turn("hi"), config("idle"))
    assert refusal("idle", {"denials": [], "receipts": []}) == (
        "update_state on governed records (receipts, denials) is refused: they are written "
        "only by the graph's own nodes"
    )
    pairs: list[tuple[str, list[object]]] = [("receipts", [{}]), ("messages", []), ("denials", [])]
    assert refusal("idle", Command(update=pairs)).startswith(
        "update_state on governed records (receipts, denials) is refused"
    )

    @dataclass
    class Values:
        messages: list[Any]
        operator_decisions: list[Any] | None = None

    assert "(operator_decisions)" in refusal("idle", Values([], [{"operator": "m"}]))
    assert refusal("idle", Command(resume={"operator": "m"})) == (
        "update_state with a resume is refused: an escalation is answered only by an "
        'operator\'s resume (a run with command={"resume": ...})'
    )
    assert refusal("idle", {"messages": []}, GOVERNED_TOOL_NODE) == (
        f"update_state as {GOVERNED_TOOL_NODE!r} is refused: it is a governance node, entered "
        "only by a run; its results are the governed records and messages it writes itself, "
        "and an escalation is answered only by an operator's resume"
    )
    first = graph.get_state_history(config("idle"))
    earliest = list(first)[-1].config
    with pytest.raises(RecordsWriteRefused) as forked:
        graph.update_state(earliest, {"messages": []}, as_node="model")
    assert str(forked.value) == (
        "update_state from an earlier checkpoint is refused: a fork would drop the governed "
        "records written after it"
    )
    # what is not refused is applied, by the sync path as by the async one
    graph.update_state(config("idle"), {"messages": [("user", "sync note")]}, as_node="model")
    graph.bulk_update_state(
        config("idle"), [[StateUpdate({"messages": [("user", "bulk note")]}, "model")]]
    )
    texts = [m.content for m in graph.get_state(config("idle")).values["messages"]]
    assert texts[-2:] == ["sync note", "bulk note"]

    await graph.ainvoke(user_turn("escalate"), config("esc"))
    assert refusal("esc", {"messages": []}) == (
        "update_state is refused: the thread has a pending escalation "
        "(denial_handler_confidence) waiting for an operator; it is answered only by an "
        'operator\'s resume (command={"resume": ...}), and no update may replace or complete it'
    )
    await graph.ainvoke(user_turn("halt"), config("halt"))
    assert refusal("halt", {"messages": []}, None) == (
        f"update_state as the last node that ran, {GOVERNED_TOOL_NODE!r} is refused: it is a "
        "governance node, entered only by a run; its results are the governed records and "
        "messages it writes itself, and an escalation is answered only by an operator's resume"
    )
    graph.update_state(config("halt"), {"messages": [("user", "after halt")]}, as_node="model")
    assert graph.get_state(config("halt")).values["messages"][-1].content == "after halt"

    paused = _governance_graph(interrupt_before=["denial_handler_confidence"])
    await paused.ainvoke(user_turn("escalate"), config("due"))
    # a handler that is due but has not asked yet is an unfinished step, not an escalation
    with pytest.raises(RecordsWriteRefused) as due:
        paused.update_state(config("due"), {"messages": []}, as_node="model")
    assert str(due.value) == (
        "update_state is refused: the thread's governed step is unfinished "
        "(denial_handler_confidence is due); continue the run (a run without input) instead, "
        "so that it finishes and records what it did"
    )
