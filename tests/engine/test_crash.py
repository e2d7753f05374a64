"""An engine killed (SIGKILL) while its webhook POST is out: the execution was recorded before
the POST (outcome unknown), so the restarted engine never sends the decision again without
``force``. Real processes, real HTTP, the same SQLite file."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mcp.types as mt
from engine_support import engine_process

from algenta_graph._net import free_port
from algenta_graph.engine import WebhookReceiver

Session = Callable[..., Any]


def body(result: Any) -> Any:
    block = result.content[0]
    assert isinstance(block, mt.TextContent), block
    return json.loads(block.text)


async def test_an_engine_killed_mid_delivery_never_delivers_that_decision_again(
    tmp_path: Path, webhook: WebhookReceiver, mcp_session: Session
) -> None:
    port, db, log = free_port(), tmp_path / "engine.sqlite", tmp_path / "engine.log"
    url = f"http://127.0.0.1:{port}/mcp"
    with engine_process(port, log, "--db", str(db)) as proc:
        async with mcp_session(url) as s:
            logged = await s.call_tool(
                "log_decision",
                {
                    "chosen_action": "ship_it",
                    "expected_value": 1.0,
                    "confidence": 0.9,
                    "risk_p5": 0.1,
                    "risk_p95": 0.5,
                },
            )
            decision_id = body(logged)["decision_id"]
            args = {
                "decision_id": decision_id,
                "webhook_url": webhook.url_for_delay(30),
                "timeout_seconds": 60,
            }
            call = asyncio.ensure_future(s.call_tool("execute_decision", args))
            for _ in range(1200):  # until the POST has reached the webhook
                if webhook.received:
                    break
                await asyncio.sleep(0.05)
            assert len(webhook.received) == 1, "the engine never reached the webhook"
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=20)
            call.cancel()
    with engine_process(port, log, "--db", str(db)):  # the lock went with the killed engine
        async with mcp_session(url) as s:
            again = await s.call_tool(
                "execute_decision", {"decision_id": decision_id, "webhook_url": webhook.url}
            )
            stored = body(await s.call_tool("get_decision", {"decision_id": decision_id}))
    assert again.isError and body(again)["error"]["gate"] == "idempotency"
    [execution] = stored["executions"]
    assert execution["execution_status"] == "unknown" and execution["retryable"] is False
    assert "engine stopped during it" in execution["failure_reason"]
    assert len(webhook.received) == 1
