"""The reference engine: a FastMCP server over streamable HTTP at ``/mcp``, and
:class:`ReferenceEngine`, which runs it on a free port in a background thread.

>>> from algenta_graph.engine import ReferenceEngine
>>> with ReferenceEngine() as engine:                                 # doctest: +SKIP
...     print(engine.url)          # http://127.0.0.1:PORT/mcp, ready for any MCP client
"""

from __future__ import annotations

import hmac
import json
import logging
import shutil
import tempfile
import time
import weakref
from collections.abc import Awaitable, Callable, Collection, MutableMapping
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import mcp.types as mt
from mcp.server.fastmcp import FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from pydantic import ValidationError

from algenta_graph._net import free_port
from algenta_graph._serve import BackgroundServer, ServiceContext
from algenta_graph.engine.errors import EngineToolError, GateDenied, InvalidArguments
from algenta_graph.engine.policy import Policy
from algenta_graph.engine.registry import RegistryTool, registry_names, registry_tools
from algenta_graph.engine.store import Store
from algenta_graph.engine.tools import IMPLEMENTED_TOOLS, NOT_SUPPORTED, GovernedTools, register

logger = logging.getLogger("algenta_graph.engine")

DENIAL_FORMS: tuple[str, ...] = ("mcp-error", "json-body", "sdk")
MAX_REQUEST_BYTES = 1024 * 1024

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def _text(payload: dict[str, Any]) -> list[mt.ContentBlock]:
    return [mt.TextContent(type="text", text=json.dumps(payload, indent=2))]


def error_result(err: EngineToolError, denials: str) -> mt.CallToolResult:
    """Render an engine error in the configured wire form.

    - ``mcp-error``: ``isError: true``, the error body as JSON text;
    - ``json-body``: ``isError: false``, ``{"error": {...}}`` as text and structuredContent;
    - ``sdk`` (the public Algenta server): ``isError: false``, ``{"error": {"code", "message":
      "API error <status>: <upstream body JSON>", "status_code"}}`` as text only.

    Protocol errors (bad arguments, unknown tool) are always ``isError: true``.
    """
    body = err.body()
    if err.protocol or denials == "mcp-error":
        return mt.CallToolResult(content=_text(body), isError=True)
    if denials == "json-body":
        return mt.CallToolResult(content=_text(body), structuredContent=body, isError=False)
    sdk = {
        "error": {
            "code": err.code,
            "message": f"API error {err.status_code}: {json.dumps(body)}",
            "status_code": err.status_code,
        }
    }
    return mt.CallToolResult(content=_text(sdk), isError=False)


def describe_validation_error(exc: ValidationError) -> str:
    """One line per problem: ``argument: what is wrong (got ...)``."""
    parts = []
    for e in exc.errors():
        loc = ".".join(str(x) for x in e["loc"]) or "arguments"
        if e["type"] == "missing":
            parts.append(f"{loc}: missing required argument")
        else:
            got = repr(e.get("input"))
            got = got if len(got) <= 60 else got[:57] + "..."
            parts.append(f"{loc}: {e['msg']} (got {got})")
    return "; ".join(parts)


class EngineMCP(FastMCP[Any]):
    """FastMCP plus the engine's call handling: the call log, one log line per call, the
    advertised registry tools, argument checks and the ``--denials`` wire form."""

    def __init__(
        self,
        *,
        store: Store,
        governed: GovernedTools,
        registry: dict[str, RegistryTool],
        denials: str,
        host: str,
    ) -> None:
        super().__init__(
            name="algenta-reference-engine",
            instructions="A local Algenta-compatible engine: call get_contract first.",
            host=host,
            log_level="WARNING",
            streamable_http_path="/mcp",
            max_request_body_size=MAX_REQUEST_BYTES,
        )
        self._store = store
        self._registry = {n: t for n, t in registry.items() if n not in IMPLEMENTED_TOOLS}
        self._denials = denials
        # The public server (the sdk form) sends text only and advertises no output schema; an
        # MCP client rejects an isError=false result without structuredContent from a tool that
        # advertises one, so the sdk form needs the text-only registration.
        register(self, governed, structured=denials != "sdk")

    async def list_tools(self) -> list[mt.Tool]:
        governed = await super().list_tools()
        return governed + [t.to_mcp() for t in self._registry.values()]

    def _check_known_arguments(self, name: str, arguments: dict[str, Any]) -> None:
        tool = self._tool_manager.get_tool(name)
        if tool is None:
            return
        unknown = sorted(set(arguments) - set(tool.parameters.get("properties", {})))
        if unknown:
            raise InvalidArguments(
                name,
                f"unknown argument(s) {', '.join(unknown)}; accepted:"
                f" {', '.join(tool.parameters.get('properties', {}))}",
            )

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        """Log the call as received, run it, and answer errors in the configured wire form."""
        started = time.perf_counter()
        await anyio.to_thread.run_sync(self._store.log_call, name, arguments)
        outcome = "interrupted"
        try:
            result = await self._dispatch(name, arguments)
            outcome = _summary(result)
            return result
        except EngineToolError as err:
            outcome = f"denied {err.gate}" if isinstance(err, GateDenied) else f"error {err.code}"
            return error_result(err, self._denials)
        finally:
            elapsed_ms = (time.perf_counter() - started) * 1000
            logger.info("tools/call %s -> %s (%.0f ms)", name, outcome, elapsed_ms)

    async def _dispatch(self, name: str, arguments: dict[str, Any]) -> Any:
        """Run one call; every failure is raised as an :class:`EngineToolError`."""
        if not isinstance(arguments, dict):
            raise InvalidArguments(name, "arguments must be a JSON object")
        if name in self._registry:
            tool = self._registry[name]
            try:
                jsonschema.validate(arguments, tool.input_schema)
            except jsonschema.ValidationError as exc:
                where = ".".join(str(p) for p in exc.absolute_path) or "arguments"
                raise InvalidArguments(name, f"{where}: {exc.message}") from None
            raise EngineToolError(
                NOT_SUPPORTED,
                f"{name} ({tool.category}) is part of the Algenta registry but the local"
                f" reference engine does not implement it; implemented tools:"
                f" {', '.join(IMPLEMENTED_TOOLS)}",
                status_code=501,
            )
        if self._tool_manager.get_tool(name) is None:
            raise EngineToolError(
                "unknown_tool",
                f"unknown tool {name!r}; tools/list shows the available ones",
                status_code=404,
                protocol=True,
            )
        self._check_known_arguments(name, arguments)
        try:
            return await super().call_tool(name, arguments)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, EngineToolError):
                raise cause from None
            if isinstance(cause, ValidationError):
                raise InvalidArguments(name, describe_validation_error(cause)) from None
            logger.exception("tools/call %s crashed", name)
            raise EngineToolError(
                "internal_error", f"{name} failed: {cause or exc}", status_code=500, protocol=True
            ) from None


def _summary(result: Any) -> str:
    """A few words on a successful result for the log line."""
    structured = result[1] if isinstance(result, tuple) and len(result) == 2 else None
    if structured is None and isinstance(result, list) and result:
        try:
            structured = json.loads(getattr(result[0], "text", ""))
        except ValueError:
            structured = None
    if isinstance(structured, dict) and "execution_status" in structured:
        return f"{structured['execution_status']} (HTTP {structured.get('response_code')})"
    if isinstance(structured, dict) and "decision_id" in structured:
        return f"ok {structured['decision_id']}"
    return "ok"


class BearerAuthForToolCalls:
    """ASGI middleware: a JSON-RPC ``tools/call`` needs ``Authorization: Bearer <api_key>``,
    otherwise HTTP 401; every other method (initialize, tools/list, ...) stays open."""

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        self.app = app
        self._expected = f"Bearer {api_key}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > MAX_REQUEST_BYTES:
                await _json_response(send, 413, {"error": "request body too large"})
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if _calls_tool(body):
            headers = dict(scope.get("headers") or [])
            given = headers.get(b"authorization", b"")
            if not hmac.compare_digest(given, self._expected):
                logger.info("tools/call refused: HTTP 401 (missing or wrong bearer token)")
                await _json_response(
                    send,
                    401,
                    {
                        "error": "unauthorized",
                        "message": "tools/call needs the header Authorization: Bearer <api key>",
                    },
                    extra_headers=[(b"www-authenticate", b'Bearer realm="algenta"')],
                )
                return

        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def _calls_tool(body: bytes) -> bool:
    try:
        payload = json.loads(body)
    except ValueError:
        return False
    messages = payload if isinstance(payload, list) else [payload]
    return any(isinstance(m, dict) and m.get("method") == "tools/call" for m in messages)


async def _json_response(
    send: Send,
    status: int,
    payload: dict[str, Any],
    extra_headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    data = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": headers + (extra_headers or []),
        }
    )
    await send({"type": "http.response.body", "body": data})


class _DropClosedStreamNoise(logging.Filter):
    """Drop mcp's traceback for a standalone SSE stream closed by a session's DELETE.

    mcp 1.x logs ``Error in standalone SSE writer`` with an ``anyio.ClosedResourceError`` when a
    client ends its session normally; nothing is wrong, so the engine keeps its log clean.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not (
            record.getMessage() == "Error in standalone SSE writer"
            and isinstance(exc, anyio.ClosedResourceError)
        )


def _quiet_mcp_stream_logger() -> None:
    mcp_logger = logging.getLogger("mcp.server.streamable_http")
    if not any(isinstance(f, _DropClosedStreamNoise) for f in mcp_logger.filters):
        mcp_logger.addFilter(_DropClosedStreamNoise())


def create_app(
    *,
    store: Store,
    policy: Policy,
    host: str = "127.0.0.1",
    api_key: str | None = None,
    allow_webhook_hosts: Collection[str] = (),
    denials: str = "mcp-error",
) -> ASGIApp:
    """The engine's ASGI app (MCP at ``/mcp``); a fresh one per server start."""
    if denials not in DENIAL_FORMS:
        raise ValueError(f"denials must be one of {', '.join(DENIAL_FORMS)}, got {denials!r}")
    _quiet_mcp_stream_logger()
    registry = registry_tools()
    governed = GovernedTools(
        store,
        policy,
        allow_webhook_hosts=allow_webhook_hosts,
        denials=denials,
        auth_required=api_key is not None,
        registry_tool_count=sum(len(v) for v in registry_names().values()),
    )
    server = EngineMCP(
        store=store, governed=governed, registry=registry, denials=denials, host=host
    )
    app: ASGIApp = server.streamable_http_app()
    if api_key:
        app = BearerAuthForToolCalls(app, api_key)
    return app


class ReferenceEngine(ServiceContext):
    """The reference engine on ``host:port`` (a free port by default) in a background thread.

    ``db`` is the SQLite file (a temporary one by default, removed when the object is
    collected); state survives a restart on the same file. Use as a sync or async context
    manager, or call :meth:`start` / :meth:`stop` (it can be started again after a stop).
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        db: str | Path | None = None,
        api_key: str | None = None,
        min_confidence: float = 0.6,
        risk_floor: float = 0.5,
        allow_webhook_hosts: Collection[str] = (),
        denials: str = "mcp-error",
    ) -> None:
        if denials not in DENIAL_FORMS:
            raise ValueError(f"denials must be one of {', '.join(DENIAL_FORMS)}, got {denials!r}")
        self.host = host
        self.port = port if port is not None else free_port(host)
        self.policy = Policy(min_confidence=min_confidence, risk_floor=risk_floor)
        self.api_key = api_key
        self.allow_webhook_hosts = tuple(allow_webhook_hosts)
        self.denials = denials
        if db is None:
            tmp = tempfile.mkdtemp(prefix="algenta-engine-")
            weakref.finalize(self, shutil.rmtree, tmp, ignore_errors=True)
            db = Path(tmp) / "engine.db"
        self.db_path = Path(db)
        self.store = Store(self.db_path)
        self._server: BackgroundServer | None = None

    @property
    def url(self) -> str:
        """The MCP endpoint, e.g. ``http://127.0.0.1:PORT/mcp``."""
        return f"http://{self.host}:{self.port}/mcp"

    def start(self) -> ReferenceEngine:
        if self._server is not None and self._server.running:
            return self
        app = create_app(
            store=self.store,
            policy=self.policy,
            host=self.host,
            api_key=self.api_key,
            allow_webhook_hosts=self.allow_webhook_hosts,
            denials=self.denials,
        )
        self._server = BackgroundServer(
            app, host=self.host, port=self.port, name=f"algenta-engine-{self.port}"
        )
        self._server.start()
        logger.info("reference engine serving %s (db %s)", self.url, self.db_path)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    @property
    def running(self) -> bool:
        return self._server is not None and self._server.running

    def call_log(self) -> list[dict[str, Any]]:
        """Every tools/call the engine received, oldest first: name and arguments as sent."""
        return self.store.call_log()

    def executions(self, decision_id: str | None = None) -> list[dict[str, Any]]:
        """Executions (receipt fields + force, override_safety, metadata), oldest first."""
        return self.store.executions(decision_id)
