"""A worker process that answers escalations at scheduled moments
(``tests/guarantees/test_governance_race.py``).

Usage: ``python race_worker.py ENGINE_URL DB_PATH SCHEDULE_JSON``; the schedule is a list of
``{"thread": ..., "answer": {...}, "at": <time.time() to resume at>}``. For each entry it waits
until ``at`` and resumes the thread with ``answer``, then prints one JSON line:
``{"thread", "ok": true}`` or ``{"thread", "already_decided_by": operator}`` or
``{"thread", "error": "..."}``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.types import Command


async def main(url: str, db: str, schedule: list[dict[str, Any]]) -> None:
    from algenta_graph.connection.engine import EngineConnection
    from algenta_graph.errors import EscalationAlreadyDecided
    from algenta_graph.graph import governed_agent
    from algenta_graph.testing import ScriptedChatModel

    model = ScriptedChatModel(replies=["answered"] * (2 * len(schedule)))
    # the reference engine has no keys: its one (absent) key is the operator credential too
    async with (
        EngineConnection(url, profile="execute", operator_key_is_agent_key=True) as conn,
        governed_agent(model, connection=conn, checkpointer=db) as graph,
    ):
        print(json.dumps({"ready": True}), flush=True)
        for entry in schedule:
            await asyncio.sleep(max(0.0, entry["at"] - time.time()))
            cfg: RunnableConfig = {"configurable": {"thread_id": entry["thread"]}}
            try:
                await graph.ainvoke(Command(resume=entry["answer"]), cfg)
                line: dict[str, Any] = {"thread": entry["thread"], "ok": True}
            except EscalationAlreadyDecided as exc:
                line = {"thread": entry["thread"], "already_decided_by": exc.claim.value.operator}
            except Exception as exc:  # reported to the test, which fails on it
                line = {"thread": entry["thread"], "error": f"{type(exc).__name__}: {exc}"}
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3])))
