"""A worker process that runs one turn of many threads, for the budgets-across-workers test.

Run as ``python budget_worker.py '<job json>'``. The job::

    {"db": "postgresql://...", "engine_url": "...", "crm_url": "...", "threads": ["t1", ...],
     "turn": 0, "calls_per_turn": 2, "thread_limit": 3, "progress": "/tmp/x/w.jsonl"}

For each thread (all at once, in this process), the scripted model looks the thread's customer
up ``calls_per_turn`` times in one step; the graph's budget (``thread_limit`` per thread) counts
the thread's records in the shared PostgreSQL checkpoints, whichever worker ran its earlier
turns. It writes ``{"done": true}`` at the end.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

TOKEN = "crm-s3cret"


async def run(job: dict[str, Any]) -> None:
    """Run the job (see the module docs)."""
    from algenta_graph.connection.engine import EngineConnection
    from algenta_graph.governance.tool_gates import Budget, ToolGates
    from algenta_graph.graph import create_governed_agent
    from algenta_graph.serving.checkpointer import open_checkpointer
    from algenta_graph.testing import ScriptedChatModel

    servers = {
        "crm": {
            "transport": "streamable_http",
            "url": job["crm_url"],
            "headers": {"Authorization": f"Bearer {TOKEN}"},
        }
    }
    gates = ToolGates(
        budgets=[Budget(tool="crm.lookup_customer", thread_limit=job["thread_limit"])]
    )
    async with (
        EngineConnection(job["engine_url"], profile="execute", extra_servers=servers) as engine,
        open_checkpointer(job["db"]) as saver,
    ):

        async def one(thread: str) -> None:
            calls = [
                {
                    "name": "lookup_customer",
                    "args": {"account_id": thread},
                    "id": f"{thread}-{job['turn']}-{i}",
                }
                for i in range(job["calls_per_turn"])
            ]
            model = ScriptedChatModel(replies=[{"content": "", "tool_calls": calls}, "done"])
            graph = await create_governed_agent(
                model, connection=engine, checkpointer=saver, tool_gates=gates
            )
            await graph.ainvoke(
                {"messages": [("user", f"look up {thread} (turn {job['turn']})")]},
                {"configurable": {"thread_id": thread}},
            )

        await asyncio.gather(*(one(t) for t in job["threads"]))
    with open(job["progress"], "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"done": True}) + "\n")


if __name__ == "__main__":
    asyncio.run(run(json.loads(sys.argv[1])))
