"""A child process that runs one step of a held call's life, for a test to SIGKILL.

Run as ``python held_call_worker.py '<job json>'``. The job::

    {"mode": "fresh" | "approve", "thread_id": "t1", "db": "/tmp/x/cp.sqlite",
     "engine_url": "http://127.0.0.1:PORT/mcp", "crm_url": "http://127.0.0.1:PORT/mcp",
     "progress": "/tmp/x/t1.jsonl", "kill_at": "claimed" | "started" | "recorded" | null}

``fresh`` sends the user's message (the model calls ``delete_customer``, which is held);
``approve`` answers the escalation with an approval. ``kill_at`` names where the child writes
``{"holding": point}`` to its progress file and then **blocks** (its event loop too) until the
test's SIGKILL: ``claimed`` (the answer is claimed, the held call not yet run), ``started``
(the write-ahead start marker is written, the call not yet sent), ``recorded`` (the call ran
and its result is written ahead, the checkpoint not yet). A child that ends writes
``{"done": true}`` (after ``{"told": ...}`` when its approval repeats one a killed child claimed:
that one is completed, and this one refused by name).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

TOKEN = "crm-s3cret"


def _write(path: str, event: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(event) + "\n")
        handle.flush()


def _hold(progress: str, point: str) -> None:
    _write(progress, {"holding": point})
    while True:  # blocks the event loop: nothing more happens in this process
        time.sleep(60)


async def run(job: dict[str, Any]) -> None:
    """Run the job (see the module docs)."""
    import aiosqlite
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from langgraph.types import Command

    import algenta_graph.nodes.applying as handler_module
    from algenta_graph.connection.engine import EngineConnection
    from algenta_graph.errors import EscalationAlreadyDecided
    from algenta_graph.governance.tool_gates import ToolGates
    from algenta_graph.graph import aclose_governed_agent, create_governed_agent
    from algenta_graph.testing import ScriptedChatModel

    point, progress = job.get("kill_at"), job["progress"]
    # the name apply_held calls run_once by (applying re-exports it): replaced there
    original = handler_module.run_once

    async def run_once(*args: Any, **kwargs: Any) -> Any:
        if point == "claimed":
            _hold(progress, point)
        outcome = await original(*args, **kwargs)
        if point == "recorded":
            _hold(progress, point)
        return outcome

    handler_module.run_once = run_once
    if point == "started":
        send = EngineConnection.call_tool

        async def call_tool(self: Any, name: str, args: Any, *, tool_call_id: str) -> Any:
            if tool_call_id.startswith("held:"):
                _hold(progress, point)
            return await send(self, name, args, tool_call_id=tool_call_id)

        EngineConnection.call_tool = call_tool  # type: ignore[method-assign]

    if job["mode"] == "fresh":
        call = {"name": "delete_customer", "args": {"account_id": "a1"}, "id": "c1"}
        replies: list[Any] = [{"content": "", "tool_calls": [call]}, "held"]
    else:
        replies = ["deleted", "deleted", "deleted"]
    servers = {
        "crm": {
            "transport": "streamable_http",
            "url": job["crm_url"],
            "headers": {"Authorization": f"Bearer {TOKEN}"},
        }
    }
    async with (
        aiosqlite.connect(job["db"], timeout=120) as conn,
        EngineConnection(job["engine_url"], profile="execute", extra_servers=servers) as engine,
    ):
        await conn.execute("PRAGMA busy_timeout = 120000")
        saver = AsyncSqliteSaver(conn)
        graph = await create_governed_agent(
            ScriptedChatModel(replies=replies),
            connection=engine,
            checkpointer=saver,
            ledger=job["db"],  # the processes that crash and complete share it
            tool_gates=ToolGates(require_approval=["crm.delete_customer"]),
        )
        cfg: RunnableConfig = {"configurable": {"thread_id": job["thread_id"]}}
        try:
            if job["mode"] == "fresh":
                await graph.ainvoke({"messages": [("user", "delete a1")]}, cfg)
            else:
                answer = {"decisions": [{"type": "approve"}], "operator": "ana"}
                await graph.ainvoke(Command(resume=answer), cfg)
        except EscalationAlreadyDecided as exc:
            # the same approval again after a kill: the one the killed child claimed is
            # completed (the thread's records hold it), and this one is told so
            _write(progress, {"told": str(exc)})
        finally:
            await aclose_governed_agent(graph)
    _write(progress, {"done": True})


if __name__ == "__main__":
    asyncio.run(run(json.loads(sys.argv[1])))
