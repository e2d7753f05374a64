"""Shared helpers for the governed-graph tests: agents over a real engine and SQLite files."""

from __future__ import annotations

import contextlib
import json
from collections import defaultdict
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from algenta_graph.connection.engine import EngineConnection
from algenta_graph.engine import ReferenceEngine
from algenta_graph.graph import aclose_governed_agent, create_governed_agent
from algenta_graph.testing import ScriptedChatModel


def call(name: str, args: Mapping[str, Any], call_id: str) -> dict[str, Any]:
    """A scripted AI reply making one tool call."""
    return {"content": "", "tool_calls": [{"name": name, "args": dict(args), "id": call_id}]}


def execute(decision_id: str, webhook_url: str, call_id: str, **extra: Any) -> dict[str, Any]:
    return call(
        "execute_decision",
        {"decision_id": decision_id, "webhook_url": webhook_url, **extra},
        call_id,
    )


def config(thread: str, **configurable: Any) -> RunnableConfig:
    return {"configurable": {"thread_id": thread, **configurable}}


async def log_decision(
    conn: EngineConnection, *, confidence: float = 0.9, risk_p5: float = 0.05
) -> str:
    """Log a decision on the engine (through the connection, outside any graph)."""
    message = await conn.call_tool(
        "log_decision",
        {
            "chosen_action": "restock_fast_movers",
            "expected_value": 1000.0,
            "confidence": confidence,
            "risk_p5": risk_p5,
            "risk_p95": 0.4,
        },
        tool_call_id="setup",
    )
    return str(tool_json(message)["decision_id"])


async def copy_thread(saver: Any, source: str, target: str) -> None:
    """Copy every checkpoint of ``source`` (and its pending writes) to ``target``, as the
    LangGraph server's ``POST /threads/{id}/copy`` does."""
    tuples = [t async for t in saver.alist(config(source))]
    for saved in reversed(tuples):  # oldest first, each under its parent
        parent = (
            saved.parent_config["configurable"]["checkpoint_id"] if saved.parent_config else None
        )
        cfg = {"configurable": {"thread_id": target, "checkpoint_ns": ""}}
        if parent:
            cfg["configurable"]["checkpoint_id"] = parent
        stored = await saver.aput(
            cfg, saved.checkpoint, saved.metadata, saved.checkpoint["channel_versions"]
        )
        by_task: dict[str, list[tuple[str, Any]]] = defaultdict(list)
        for task_id, channel, value in saved.pending_writes or []:
            by_task[task_id].append((channel, value))
        for task_id, writes in by_task.items():
            await saver.aput_writes(stored, writes, task_id)


def tool_json(message: ToolMessage) -> dict[str, Any]:
    artifact = message.artifact if isinstance(message.artifact, Mapping) else {}
    data = artifact.get("structured_content")
    if data is None:
        content = message.content
        text = (
            content
            if isinstance(content, str)
            else "".join(p.get("text", "") for p in content if isinstance(p, Mapping))
        )
        data = json.loads(text)
    if isinstance(data, Mapping) and set(data) == {"result"}:
        data = data["result"]
    return dict(data)


def executions(engine: ReferenceEngine, decision_id: str | None = None) -> list[dict[str, Any]]:
    return engine.executions(decision_id)


def execute_calls(engine: ReferenceEngine) -> list[dict[str, Any]]:
    return [c for c in engine.call_log() if c["name"] == "execute_decision"]


def tool_messages(values: Mapping[str, Any]) -> list[ToolMessage]:
    return [m for m in values["messages"] if isinstance(m, ToolMessage)]


RELAXED_ENGINE: dict[str, Any] = {"operator_key_is_agent_key": True}
"""How the tests connect to a reference engine without keys (a relaxed local engine): its one
credential (none) is also the operator credential, said explicitly; without it an override is
refused before it is sent (``OperatorCredentialMissing``)."""


@contextlib.asynccontextmanager
async def open_connection(
    engine: ReferenceEngine, profile: str = "execute"
) -> AsyncIterator[EngineConnection]:
    async with EngineConnection(engine.url, profile=profile, **RELAXED_ENGINE) as conn:
        yield conn


@contextlib.asynccontextmanager
async def agent(
    conn: EngineConnection,
    db: Path,
    replies: Sequence[Any],
    **options: Any,
) -> AsyncIterator[tuple[Any, ScriptedChatModel]]:
    """A compiled governed graph over ``conn`` with a SQLite file checkpointer, its ledger in
    the same file (as every process on that file shares it)."""
    model = ScriptedChatModel(replies=list(replies))
    async with AsyncSqliteSaver.from_conn_string(str(db)) as saver:
        graph = await create_governed_agent(
            model, connection=conn, checkpointer=saver, ledger=str(db), **options
        )
        try:
            yield graph, model
        finally:
            await aclose_governed_agent(graph)


async def nodes_run(graph: Any, payload: Any, cfg: Any) -> list[str]:
    """Run to the end (or an interrupt) and return the node names in execution order."""
    order: list[str] = []
    async for chunk in graph.astream(payload, cfg, stream_mode="updates"):
        order.extend(chunk)
    return order
