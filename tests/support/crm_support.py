"""A real CRM MCP server for the tool-gate tests: FastMCP over streamable HTTP, bearer token.

:func:`running_crm` serves ``lookup_customer``, ``delete_customer`` and ``refund`` (and, as a
second server, the same names again: a look-alike) on a free port, and counts every call each
tool really received, so a test can prove what ran and how often. ``destructive=True`` adds
``purge_customer``, which the server marks ``destructiveHint: true`` (MCP tool annotations), and
``email_customer`` (an address and a body).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from mcp.server.fastmcp import FastMCP
from mcp.types import ToolAnnotations

from algenta_graph._serve import BackgroundServer

TOKEN = "crm-s3cret"


@dataclass
class CrmServer:
    """A running CRM server: its URL and every call it received."""

    url: str
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    hold: threading.Event | None = None
    """When set to an event: the next ``delete_customer`` records its call, sets ``entered``
    and waits for the event (a call in flight, for a test to kill its caller meanwhile)."""
    entered: threading.Event = field(default_factory=threading.Event)
    delays: dict[str, float] = field(default_factory=dict)
    """Seconds a tool takes after recording its call (a call in flight, for a test to cancel or
    kill its caller meanwhile)."""

    def count(self, tool: str) -> int:
        """How many times ``tool`` really ran."""
        return sum(1 for name, _ in self.calls if name == tool)

    def connection(self) -> dict[str, Any]:
        """Its ``extra_servers`` entry (the bearer token given literally)."""
        return crm_connection(self.url)


def crm_connection(url: str) -> dict[str, Any]:
    """The ``extra_servers`` entry of the CRM at ``url`` (a worker process gets only the URL)."""
    return {
        "transport": "streamable_http",
        "url": url,
        "headers": {"Authorization": f"Bearer {TOKEN}"},
    }


def crm_app(server: CrmServer, label: str, destructive: bool = False) -> Any:
    """The CRM's ASGI app (refuses a request without the bearer token)."""
    mcp = FastMCP(label, stateless_http=True, json_response=True, log_level="WARNING")

    if destructive:

        @mcp.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True))
        def purge_customer(account_id: str) -> dict[str, Any]:
            """Erase every record of a customer, irreversibly."""
            server.calls.append(("purge_customer", {"account_id": account_id}))
            return {"purged": account_id}

        @mcp.tool()
        def email_customer(address: str, body: str) -> dict[str, Any]:
            """Send an email to a customer's address."""
            server.calls.append(("email_customer", {"address": address, "body": body}))
            return {"sent": address}

    @mcp.tool()
    def lookup_customer(account_id: str) -> dict[str, Any]:
        """Find a customer record in the CRM by account id."""
        server.calls.append(("lookup_customer", {"account_id": account_id}))
        return {"account": account_id, "tier": "silver"}

    @mcp.tool()
    def delete_customer(account_id: str, reason: str = "") -> dict[str, Any]:
        """Delete a customer and all of its records from the CRM."""
        server.calls.append(("delete_customer", {"account_id": account_id, "reason": reason}))
        time.sleep(server.delays.get("delete_customer", 0.0))
        hold, server.hold = server.hold, None
        if hold is not None:
            server.entered.set()
            hold.wait(60)
        return {"deleted": account_id}

    @mcp.tool()
    def refund(account_id: str, amount: float) -> dict[str, Any]:
        """Refund an amount of money to a customer's card."""
        server.calls.append(("refund", {"account_id": account_id, "amount": amount}))
        time.sleep(server.delays.get("refund", 0.0))
        return {"refunded": amount, "account": account_id}

    @mcp.tool(name="customers.delete")
    def customers_delete(account_id: str) -> dict[str, Any]:
        """Delete a customer (a name providers reject: the model sees a provider-safe one)."""
        server.calls.append(("customers.delete", {"account_id": account_id}))
        return {"deleted": account_id}

    inner = mcp.streamable_http_app()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope["headers"]).get(b"authorization", b"").decode()
            if given != f"Bearer {TOKEN}":
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
        await inner(scope, receive, send)

    return app


@contextlib.contextmanager
def running_crm(label: str = "crm", *, destructive: bool = False) -> Iterator[CrmServer]:
    """Serve a CRM on a free port; stop it afterwards."""
    server = CrmServer(url="")
    background = BackgroundServer(crm_app(server, label, destructive), name=f"{label}-fastmcp")
    background.start()
    server.url = f"http://127.0.0.1:{background.port}/mcp"
    try:
        yield server
    finally:
        background.stop()
