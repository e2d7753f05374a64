"""A small, real FastMCP server over HTTP that speaks every ``execute_decision`` wire form.

It serves the Algenta tool names (and one tool outside every profile) on a free port, records
every JSON-RPC request it receives (method, session id, the ``traceparent`` header and
``params._meta``, and for ``tools/call`` the tool name and the arguments exactly as received),
and can require a bearer token, so tests can prove what
reached a server, how many sessions were opened, and that a refused call never arrived.

``execute_decision`` answers in the wire form named by its ``decision_id``: ``"<form>"`` or
``"<form>:<gate>"``, ``form`` one of :data:`DENIAL_FORMS` (with a gate) or
:data:`RECEIPT_FORMS`; any other id gets a plain receipt.

    with WireServer() as server:
        ...  # connect to server.url; inspect server.calls / server.methods()
        server.stop(); server.start()  # same port, same records
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import MutableMapping
from typing import Any

from mcp.server.fastmcp import FastMCP
from mcp.types import CallToolResult, ContentBlock, TextContent
from pydantic import BaseModel

from algenta_graph._net import free_port
from algenta_graph._serve import BackgroundServer, BackgroundService
from algenta_graph.engine.guard import replay_body
from algenta_graph.engine.mcp_server import quiet_mcp_stream_logger

DENIAL_FORMS = (
    "mcp_error",  # isError true, the denial JSON as text
    "mcp_error_prefixed",  # a raised error: FastMCP's "Error executing tool ...: {json}"
    "json_body",  # isError false, {"error": {...}} as text
    "structured",  # isError false, structuredContent = body (and text)
    "structured_wrapped",  # structuredContent = {"result": body}, no text
    "sdk",  # the public Algenta server: the upstream body inside "API error 409: ..."
    "double",  # the body JSON-encoded twice in text
)
RECEIPT_FORMS = ("receipt_text", "receipt_structured", "receipt_wrapped", "receipt_double")
HINTS = {
    "idempotency": "set force=true (operator only) to deliver once more",
    "confidence": "set override_safety=true (operator only)",
    "risk_floor": "set override_safety=true (operator only)",
}


def denial_body(gate: str) -> dict[str, Any]:
    return {
        "error": {
            "code": f"execution_blocked_{gate}",
            "gate": gate,
            "message": f"blocked by the {gate} gate",
            "override_hint": HINTS.get(gate, "ask an operator"),
        }
    }


def receipt_body(decision_id: str, webhook_url: str, *, overridden: bool) -> dict[str, Any]:
    return {
        "decision_id": decision_id,
        "webhook_url": webhook_url,
        "execution_status": "delivered",
        "response_code": 200,
        "executed_at": "2026-01-01T00:00:00Z",
        "policy_snapshot_id": "pol_wire",
        "schema_snapshot_id": "sch_wire",
        "manifest_version": "1.0.0",
        "payload_summary": {"action": "wire"},
        "safety_overridden": overridden,
    }


def _text(value: Any) -> list[ContentBlock]:
    return [TextContent(type="text", text=value if isinstance(value, str) else json.dumps(value))]


class ExecuteOptions(BaseModel):
    """Nested options: lands in the schema's ``$defs``, with flags to scrub."""

    note: str = ""
    force: bool = False
    override_safety: bool = False


class PlanSpec(BaseModel):
    action: str
    Force: bool = False
    limits: dict[str, float] = {}


def build_server(calls: list[dict[str, Any]], *, name: str = "wire") -> FastMCP:
    """The FastMCP app; ``calls`` receives ``{"name", "arguments"}`` per executed tool."""
    server: FastMCP = FastMCP(name, log_level="WARNING")

    def record(tool: str, arguments: dict[str, Any]) -> None:
        calls.append({"name": tool, "arguments": arguments})

    @server.tool()
    def get_contract() -> dict[str, Any]:
        """Fetch the live capability contract of the engine."""
        record("get_contract", {})
        return {"contract_version": "wire", "tools": 9}

    @server.tool()
    def query_data(dataset: str, filters: dict[str, Any] | None = None) -> dict[str, Any]:
        """Run one governed query against a dataset."""
        record("query_data", {"dataset": dataset, "filters": filters})
        return {"rows": [], "dataset": dataset}

    @server.tool()
    def recommend(scenario: str) -> dict[str, Any]:
        """Return a governed recommendation for a scenario."""
        return {"recommendation": scenario}

    @server.tool()
    def plan_decision(spec: PlanSpec, Force: bool, OVERRIDE_SAFETY: bool = False) -> dict[str, Any]:
        """Propose a decision plan (its schema carries flags in odd spellings)."""
        return {"plan_hash": "p1", "action": spec.action}

    @server.tool()
    def log_decision(chosen_action: str, confidence: float = 0.9) -> dict[str, Any]:
        """Persist a decision record."""
        return {"decision_id": f"dec_{chosen_action}"}

    @server.tool()
    def execute_decision(
        decision_id: str,
        webhook_url: str,
        timeout_seconds: float | None = None,
        force: bool = False,
        override_safety: bool = False,
        metadata: dict[str, Any] | None = None,
        options: ExecuteOptions | None = None,
    ) -> CallToolResult:
        """Dispatch an already-logged decision; answers in the wire form its id names."""
        form, _, gate = decision_id.partition(":")
        overridden = bool(force or override_safety)
        receipt = receipt_body(decision_id, webhook_url, overridden=overridden)
        if form in DENIAL_FORMS and not overridden:
            body = denial_body(gate or "confidence")
            if form == "mcp_error":
                return CallToolResult(content=_text(body), isError=True)
            if form == "mcp_error_prefixed":
                raise ValueError(json.dumps(body))
            if form == "json_body":
                return CallToolResult(content=_text(body))
            if form == "structured":
                return CallToolResult(content=_text(body), structuredContent=body)
            if form == "structured_wrapped":
                return CallToolResult(content=[], structuredContent={"result": body})
            if form == "sdk":
                upstream = json.dumps(body, ensure_ascii=True, sort_keys=True)
                sdk = {
                    "error": {
                        "code": f"execution_blocked_{gate or 'confidence'}",
                        "message": f"API error 409: {upstream}",
                        "status_code": 409,
                    }
                }
                return CallToolResult(content=_text(json.dumps(sdk, sort_keys=True)))
            return CallToolResult(content=_text(json.dumps(json.dumps(body))))
        if form == "junk":
            return CallToolResult(content=_text("ok, probably"))
        if form == "receipt_structured":
            return CallToolResult(content=_text(receipt), structuredContent=receipt)
        if form == "receipt_wrapped":
            return CallToolResult(content=[], structuredContent={"result": receipt})
        if form == "receipt_double":
            return CallToolResult(content=_text(json.dumps(json.dumps(receipt))))
        return CallToolResult(content=_text(receipt))

    @server.tool()
    def get_decision(decision_id: str) -> dict[str, Any]:
        """Read a decision and its executions."""
        return {"decision": {"decision_id": decision_id}, "executions": []}

    @server.tool()
    async def slow(seconds: float) -> dict[str, Any]:
        """Answer after ``seconds`` (for timeouts)."""
        await asyncio.sleep(seconds)
        return {"slept": seconds}

    @server.tool()
    def delete_connector(connector_id: str) -> dict[str, Any]:
        """An admin tool outside every profile but ``full``."""
        return {"deleted": connector_id}

    return server


Scope = MutableMapping[str, Any]


class _Recorder:
    """ASGI middleware: records each JSON-RPC request; optional bearer token on every POST."""

    def __init__(self, app: Any, owner: WireServer) -> None:
        self.app = app
        self.owner = owner

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        chunks = []
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        headers = dict(scope.get("headers") or [])
        authorised = self.owner.api_key is None or headers.get(b"authorization", b"") == (
            f"Bearer {self.owner.api_key}".encode()
        )
        self.owner._record(body, headers, authorised)
        if not authorised:
            data = b'{"error": "unauthorized"}'
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": data})
            return
        await self.app(scope, replay_body(body, receive), send)


class WireServer(BackgroundService):
    """:func:`build_server` on a fixed free port in a background thread; restartable."""

    def __init__(self, *, api_key: str | None = None, name: str = "wire") -> None:
        self.api_key = api_key
        self.name = name
        self.port = free_port()
        self.calls: list[dict[str, Any]] = []  # tools the server executed
        self.requests: list[dict[str, Any]] = []  # every JSON-RPC request that arrived
        self._lock = threading.Lock()
        self._server: BackgroundServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def _record(self, body: bytes, headers: dict[bytes, bytes], authorised: bool) -> None:
        try:
            payload = json.loads(body)
        except ValueError:
            payload = None
        messages = payload if isinstance(payload, list) else [payload]
        session = headers.get(b"mcp-session-id", b"").decode() or None
        with self._lock:
            for message in messages:
                if isinstance(message, dict) and "method" in message:
                    params = message.get("params") or {}
                    traceparent = headers.get(b"traceparent")
                    self.requests.append(
                        {
                            "method": message["method"],
                            "session": session,
                            "authorised": authorised,
                            "tool": params.get("name"),
                            "arguments": params.get("arguments"),
                            # the W3C trace context: the HTTP header and params._meta
                            "traceparent": traceparent.decode() if traceparent else None,
                            "meta": params.get("_meta"),
                        }
                    )

    def methods(self, method: str | None = None) -> list[dict[str, Any]]:
        """The recorded requests, optionally only those of one JSON-RPC method."""
        with self._lock:
            return [dict(r) for r in self.requests if method is None or r["method"] == method]

    def tool_calls(self, name: str | None = None) -> list[dict[str, Any]]:
        """Recorded ``tools/call`` requests (name + arguments as received)."""
        return [r for r in self.methods("tools/call") if name is None or r["tool"] == name]

    def start(self) -> WireServer:
        if self.running:
            return self
        quiet_mcp_stream_logger()  # a session's normal DELETE is not an error
        app = build_server(self.calls, name=self.name).streamable_http_app()
        self._server = BackgroundServer(
            _Recorder(app, self), port=self.port, name=f"wire-{self.port}"
        )
        self._server.start()
        return self
