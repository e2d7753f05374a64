"""A worker process running one turn or one answer on a thread, for the ledger's multi-process
tests (a test runs several at once, and SIGKILLs one when it chooses).

Run as ``python ledger_worker.py '<job json>'``. The job::

    {"db": "postgresql://..." | "/tmp/x/cp.sqlite", "engine_url": "...", "crm_url": "...",
     "thread_id": "t1", "progress": "/tmp/x/w.jsonl",
     "mode": "call" | "say" | "answer",
     "call": {"name": "refund", "args": {...}, "id": "c1"}   (mode "call"),
     "answer": {"decisions": [...], "operator": "ana"}       (mode "answer")}

The graph is the factory's, on ``open_checkpointer(db)`` (its ledger in the same database, as
every process on it chooses it), the CRM as an extra server, ``delete_customer`` held for
approval and a budget of one ``refund`` per thread. ``call``: a user turn in which the scripted
model makes ``call``; ``say``: a user turn the model answers in words (a thread's unfinished
step is finished first); ``answer``: the operator's resume. Progress, one JSON line each:
``{"event": "ready"}``, then ``{"event": "done", "values": {...}}``, or ``{"event": "refused",
"error": <type>, "message": ...}`` for an answer refused by name, or ``{"event": "error",
"error": <traceback>}``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import traceback
from typing import Any


def _write(path: str, event: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(event, default=str) + "\n")
        handle.flush()


async def run(job: dict[str, Any]) -> None:
    """Run the job (see the module docs)."""
    from crm_support import crm_connection
    from langgraph.types import Command

    from algenta_graph.connection.engine import EngineConnection
    from algenta_graph.errors import EscalationAlreadyDecided, NoEscalationPending
    from algenta_graph.governance.tool_gates import Budget, ToolGates
    from algenta_graph.graph import governed_agent
    from algenta_graph.serving.checkpointer import open_checkpointer
    from algenta_graph.testing import ScriptedChatModel

    servers = {"crm": crm_connection(job["crm_url"])}
    gates = ToolGates(
        require_approval=["crm.delete_customer"],
        budgets=[Budget(tool="crm.refund", thread_limit=1)],
    )
    mode, progress = job["mode"], job["progress"]
    replies: list[Any] = ["done", "done", "done"]
    if mode == "call":
        replies = [{"content": "", "tool_calls": [job["call"]]}, "done", "done"]
    config: Any = {"configurable": {"thread_id": job["thread_id"]}}
    async with (
        EngineConnection(job["engine_url"], profile="execute", extra_servers=servers) as engine,
        open_checkpointer(job["db"]) as saver,
        governed_agent(
            ScriptedChatModel(replies=replies),
            connection=engine,
            checkpointer=saver,
            tool_gates=gates,
        ) as graph,
    ):
        _write(progress, {"event": "ready"})
        try:
            if mode == "answer":
                out = await graph.ainvoke(Command(resume=job["answer"]), config)
            else:
                text = "do it" if mode == "call" else "what happened?"
                out = await graph.ainvoke({"messages": [("user", text)]}, config)
        except (EscalationAlreadyDecided, NoEscalationPending) as exc:
            _write(progress, {"event": "refused", "error": type(exc).__name__, "message": str(exc)})
            return
        records = ("denials", "operator_decisions", "tool_calls")
        _write(progress, {"event": "done", "values": {k: out.get(k) for k in records}})


def main(job: dict[str, Any]) -> None:
    try:
        asyncio.run(run(job))
    except Exception:
        _write(job["progress"], {"event": "error", "error": traceback.format_exc()})
        raise


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
