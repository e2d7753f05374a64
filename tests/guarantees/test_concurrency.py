"""Concurrency: 8 threads at once on one ``AsyncSqliteSaver`` file lose no receipt and share
no state.

One compiled graph, one engine connection and one SQLite checkpoint file serve 8 threads running
concurrently. Phase 1: every thread executes its own 3 decisions, one turn each, all threads
interleaved. Phase 2 (all threads again at once): every thread re-executes its own first
decision (the thread's own receipts stop it before the engine) and tries its neighbour's first
decision (the engine's idempotency gate stops it, and the graph must not adopt the neighbour's
receipt as its own). Then a fresh saver on the same file reads every thread back.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

from guarantee_support import figure, log_decision
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from mcp import ClientSession

from algenta_graph.connection.engine import EngineConnection
from algenta_graph.engine import ReferenceEngine, WebhookReceiver
from algenta_graph.graph import create_governed_agent
from algenta_graph.models import DemoChatModel

THREADS = 8
DECISIONS_PER_THREAD = 3


async def test_eight_threads_on_one_sqlite_file_lose_nothing_and_leak_nothing(
    tmp_path: Path,
    engine: ReferenceEngine,
    webhook: WebhookReceiver,
    mcp_session: Callable[..., AbstractAsyncContextManager[ClientSession]],
) -> None:
    names = [f"conc-{i}" for i in range(THREADS)]
    async with mcp_session(engine.url) as session:
        owned = {
            name: [
                await log_decision(session, action=f"{name}-action-{j}")
                for j in range(DECISIONS_PER_THREAD)
            ]
            for name in names
        }
    owner = {d: name for name, ds in owned.items() for d in ds}
    db = str(tmp_path / "checkpoints.sqlite")

    def prompt(decision_id: str, name: str) -> dict[str, Any]:
        text = f"[{name}] execute decision_id={decision_id} webhook_url={webhook.url}"
        return {"messages": [HumanMessage(text)]}

    def config(name: str) -> Any:
        return {"configurable": {"thread_id": name}}

    async with (
        EngineConnection(engine.url, profile="execute") as conn,
        AsyncSqliteSaver.from_conn_string(db) as saver,
    ):
        graph = await create_governed_agent(
            DemoChatModel(), connection=conn, checkpointer=saver, single_process=True
        )

        async def own_turns(name: str) -> None:
            for decision_id in owned[name]:
                await graph.ainvoke(prompt(decision_id, name), config(name))

        await asyncio.gather(*(own_turns(name) for name in names))

        async def probe_turns(index: int) -> None:
            name = names[index]
            neighbour = names[(index + 1) % THREADS]
            await graph.ainvoke(prompt(owned[name][0], name), config(name))
            await graph.ainvoke(prompt(owned[neighbour][0], name), config(name))

        await asyncio.gather(*(probe_turns(i) for i in range(THREADS)))
        live = {name: (await graph.aget_state(config(name))).values for name in names}

    # read every thread back through a new saver (a new SQLite connection) on the same file
    async with (
        EngineConnection(engine.url, profile="execute") as conn,
        AsyncSqliteSaver.from_conn_string(db) as saver,
    ):
        graph = await create_governed_agent(
            DemoChatModel(), connection=conn, checkpointer=saver, single_process=True
        )
        stored = {name: (await graph.aget_state(config(name))).values for name in names}

    lost = 0
    leaked = 0
    for index, name in enumerate(names):
        neighbour = names[(index + 1) % THREADS]
        state = stored[name]
        assert state["receipts"] == live[name]["receipts"]
        assert len(state["messages"]) == len(live[name]["messages"])
        mine = [r["decision_id"] for r in state["receipts"]]
        lost += len(set(owned[name]) - set(mine))
        leaked += sum(1 for d in mine if owner.get(d) != name)
        for message in state["messages"]:
            if isinstance(message, HumanMessage):
                leaked += int(f"[{name}]" not in str(message.content))
            if isinstance(message, AIMessage):
                for call in message.tool_calls:
                    decision = call["args"].get("decision_id")
                    if decision not in owned[name] and decision != owned[neighbour][0]:
                        leaked += 1
        assert sorted(mine) == sorted(owned[name]), (name, state["receipts"])
        assert all(r["execution_status"] == "delivered" for r in state["receipts"])
        gates = sorted((d["decision_id"], d["source"]) for d in state["denials"])
        assert gates == sorted(
            [(owned[name][0], "thread_receipts"), (owned[neighbour][0], "model")]
        ), state["denials"]
        assert all(d["gate"] == "idempotency" for d in state["denials"])

    posts = Counter(
        r["body"]["decision_id"] for r in webhook.requests if isinstance(r["body"], dict)
    )
    tagged = {
        r["body"]["decision_id"]: r["body"]["metadata"]["algenta_graph"]["thread_id"]
        for r in webhook.requests
        if isinstance(r["body"], dict)
    }
    executions = engine.executions()
    duplicates = sum(n - 1 for n in posts.values() if n > 1)
    figure(
        "concurrency",
        threads=THREADS,
        concurrent_runs=THREADS * (DECISIONS_PER_THREAD + 2),
        decisions=len(owner),
        receipts=sum(len(s["receipts"]) for s in stored.values()),
        deliveries=sum(posts.values()),
        lost=lost,
        leaked=leaked,
        duplicates=duplicates,
    )
    assert lost == 0
    assert leaked == 0
    assert duplicates == 0
    assert set(posts) == set(owner)
    assert tagged == owner  # each delivery carries the thread that made it
    assert len(executions) == len(owner)
