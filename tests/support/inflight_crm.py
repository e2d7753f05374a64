"""A real CRM over MCP whose calls a test can hold in flight: what a cancelled gated call meets.

:func:`running_inflight_crm` serves ``refund`` and ``delete_customer`` (FastMCP, streamable
HTTP) on a free port, in a thread of the test's process, so a ``langgraph dev`` subprocess, a
library graph and the test all see one CRM. It counts every call each tool really
received, per account, and :meth:`InflightCrm.hold` makes the next call of a tool wait (without
blocking the server's event loop) until the test releases it: the call is then in flight at the
CRM while the test cancels the run that sent it. (The CRM of the gate tests, ``crm_support``,
checks a bearer token; this one does not: what it proves is how often a call ran.)
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from mcp.server.fastmcp import FastMCP

from algenta_graph._serve import BackgroundServer

HOLD_SECONDS = 120.0
"""The longest a held call waits for its release (then it answers anyway)."""


@dataclass(frozen=True)
class _Hold:
    entered: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)


@dataclass
class InflightCrm:
    """A running CRM: its URL, every call it received, and the holds a test set."""

    url: str = ""
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    _armed: dict[str, _Hold] = field(default_factory=dict)  # waits for the next call
    _holds: dict[str, _Hold] = field(default_factory=dict)  # the latest hold of each tool
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, tool: str, account_id: str) -> int:
        """How many times ``tool`` really ran for ``account_id``."""
        with self._lock:
            return sum(1 for n, a in self.calls if n == tool and a["account_id"] == account_id)

    def hold(self, tool: str) -> None:
        """The next call of ``tool`` waits in flight until :meth:`release` (see :meth:`entered`)."""
        with self._lock:
            self._armed[tool] = self._holds[tool] = _Hold()

    def entered(self, tool: str) -> bool:
        """Whether the held call of ``tool`` has arrived (and now waits)."""
        with self._lock:
            held = self._holds.get(tool)
        return held is not None and held.entered.is_set()

    def release(self, tool: str) -> None:
        """Let the held call of ``tool`` answer (a dead caller gets nothing)."""
        with self._lock:
            self._armed.pop(tool, None)
            held = self._holds.get(tool)
        if held is not None:
            held.released.set()

    def connection(self) -> dict[str, Any]:
        """Its ``extra_servers`` entry."""
        return {"transport": "streamable_http", "url": self.url}

    async def _arrive(self, tool: str, args: dict[str, Any]) -> None:
        with self._lock:
            self.calls.append((tool, args))
            held = self._armed.pop(tool, None)
        if held is None:
            return
        held.entered.set()
        await asyncio.get_running_loop().run_in_executor(None, held.released.wait, HOLD_SECONDS)


def _app(crm: InflightCrm) -> Any:
    mcp = FastMCP("crm", stateless_http=True, json_response=True, log_level="WARNING")

    @mcp.tool()
    async def refund(account_id: str, amount: float) -> dict[str, Any]:
        """Refund an amount of money to a customer's card."""
        await crm._arrive("refund", {"account_id": account_id, "amount": amount})
        return {"refunded": amount, "account": account_id}

    @mcp.tool()
    async def delete_customer(account_id: str, reason: str = "") -> dict[str, Any]:
        """Delete a customer and all of its records from the CRM."""
        await crm._arrive("delete_customer", {"account_id": account_id, "reason": reason})
        return {"deleted": account_id}

    return mcp.streamable_http_app()


@contextlib.contextmanager
def running_inflight_crm() -> Iterator[InflightCrm]:
    """Serve the CRM on a free port; release every hold and stop it afterwards."""
    crm = InflightCrm()
    background = BackgroundServer(_app(crm), name="inflight-crm")
    background.start()
    crm.url = f"http://127.0.0.1:{background.port}/mcp"
    try:
        yield crm
    finally:
        for tool in list(crm._holds):
            crm.release(tool)
        background.stop()
