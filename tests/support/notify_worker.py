"""A worker process of the notification test: the governed graph on a shared checkpoint store.

Run as ``python notify_worker.py JOB.json``. The job::

    {"db": "postgresql://...", "engine_url": "http://127.0.0.1:PORT/mcp",
     "notify_url": "http://127.0.0.1:PORT/hook", "secret": "...",
     "raise": [{"thread_id": "t1", "prompt": "execute_decision decision_id=... ..."}],
     "meet": ["t1", "t2", ...], "rounds": 3,
     "raised": "/tmp/x/w1.raised", "go": "/tmp/x/go", "done": "/tmp/x/w1.done"}

The worker builds the real factory's graph (``create_governed_agent``, the offline demo model)
with a notification URL in its escalation settings (``escalation=``). It raises the escalations
of its ``raise`` threads, writes ``raised``, waits for ``go``, then meets every ``meet`` thread's
escalation ``rounds`` times (``ainvoke(None)``: the handler runs again, as after a restart, a
retry or another worker), and writes ``done`` with what it saw (JSON).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any


async def _wait_for(path: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        await asyncio.sleep(0.01)


async def run(job: dict[str, Any]) -> dict[str, Any]:
    from langchain_core.messages import HumanMessage

    from algenta_graph.governance.escalations import EscalationSettings, WebhookNotify
    from algenta_graph.graph import governed_agent
    from algenta_graph.models import DemoChatModel
    from algenta_graph.serving.checkpointer import open_checkpointer

    settings = EscalationSettings(
        notify_url=WebhookNotify(url=job["notify_url"], secret=job["secret"], attempts=1)
    )
    seen: dict[str, Any] = {"pid": os.getpid(), "interrupts": {}, "errors": []}
    async with (
        open_checkpointer(job["db"]) as saver,
        governed_agent(
            DemoChatModel(),
            base_url=job["engine_url"],
            profile="execute",
            checkpointer=saver,
            escalation=settings,
        ) as graph,
    ):

        async def raise_one(spec: dict[str, Any]) -> None:
            config: Any = {"configurable": {"thread_id": spec["thread_id"]}}
            await graph.ainvoke({"messages": [HumanMessage(spec["prompt"])]}, config)

        await asyncio.gather(*(raise_one(spec) for spec in job["raise"]))
        Path(job["raised"]).write_text("raised")
        await _wait_for(job["go"])

        async def meet(thread: str) -> None:
            config: Any = {"configurable": {"thread_id": thread}}
            try:
                await graph.ainvoke(None, config)
                state = await graph.aget_state(config)
                seen["interrupts"][thread] = [i.value["escalation_id"] for i in state.interrupts]
            except Exception as exc:  # counted by the test: there should be none
                seen["errors"].append(f"{thread}: {type(exc).__name__}: {exc}")

        for _ in range(job["rounds"]):
            await asyncio.gather(*(meet(t) for t in job["meet"]))
    return seen


def main() -> None:
    job = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    seen = asyncio.run(run(job))
    Path(job["done"]).write_text(json.dumps(seen), encoding="utf-8")


if __name__ == "__main__":
    main()
