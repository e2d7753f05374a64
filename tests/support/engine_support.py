"""What the reference engine's tests share: ``algenta-graph engine`` as a subprocess, the
strict engine's keys (an agent, operators, a key that may not execute, operator keys enabled
to execute), and the MCP and approval calls the tests make with them.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import mcp.types as mt
from mcp import ClientSession

from algenta_graph.engine import ApiKey, ReferenceEngine


def text(result: Any) -> str:
    """The text of a tool result's first content block."""
    block = result.content[0]
    assert isinstance(block, mt.TextContent), block
    return block.text


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def engine_process(port: int, log: Path, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    """Start ``python -m algenta_graph.cli engine``; SIGTERM it (by PID) on exit."""
    mode = [] if "--strict" in args or "--relaxed" in args else ["--relaxed"]
    cmd = [sys.executable, "-m", "algenta_graph.cli", "engine", *mode, "--port", str(port), *args]
    with log.open("ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not _listening(port):
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "engine did not start"
            time.sleep(0.05)
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


AGENT = "tok-agent-graph"
OPERATOR = "tok-operator-alice"
NO_EXECUTE = "tok-agent-readonly"
ONCALL = "tok-operator-oncall-strict"
KEYS = {
    AGENT: ApiKey("graph-worker", frozenset({"agent"}), execute=True),
    OPERATOR: ApiKey("alice", frozenset({"operator"})),
    NO_EXECUTE: ApiKey("reader", frozenset({"agent"}), execute=False),
    # an operator key enabled to execute: only such a key may send force / override_safety
    ONCALL: ApiKey("oncall", frozenset({"operator"}), execute=True),
}


def body(result: Any) -> Any:
    block = result.content[0]
    assert isinstance(block, mt.TextContent), block
    return json.loads(block.text)


async def call(s: ClientSession, name: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await s.call_tool(name, args)
    assert not result.isError, body(result)
    return dict(body(result))


async def plan(s: ClientSession, scenario: str = "restock_inventory") -> dict[str, Any]:
    return await call(s, "plan_decision", {"scenario": scenario})


async def log_planned(s: ClientSession, p: dict[str, Any]) -> str:
    fields = ("chosen_action", "expected_value", "confidence", "risk_p5", "risk_p95")
    logged = await call(
        s, "log_decision", {**{k: p[k] for k in fields}, "plan_hash": p["plan_hash"]}
    )
    return str(logged["decision_id"])


async def approve(
    engine: ReferenceEngine,
    plan_id: str,
    payload: Any,
    token: str | None = OPERATOR,
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(timeout=10) as http:
        return await http.post(
            engine.approve_url.format(plan_id=plan_id), json=payload, headers=headers
        )


STAFF = "tok-operator-oncall"
"""An operator key the engine operator enabled to execute: what the graph's operator path uses."""
BOTH = "tok-agent-and-operator"
ROLES_KEYS = {
    **KEYS,
    STAFF: ApiKey("oncall-ops", frozenset({"operator"}), execute=True),
    BOTH: ApiKey("superuser", frozenset({"agent", "operator"}), execute=True),
}
