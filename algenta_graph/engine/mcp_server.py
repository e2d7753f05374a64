"""The engine's MCP server: FastMCP plus the engine's handling of each ``tools/call``.

:class:`EngineMCP` logs every call as received, advertises the rest of the Algenta registry
(answered ``not_supported_in_reference_engine``), checks arguments, and answers every refusal in
the ``--denials`` wire form (:data:`DENIAL_FORMS`, :func:`error_result`).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import anyio
import jsonschema
import mcp.types as mt
from mcp.server.fastmcp import FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from pydantic import ValidationError

from algenta_graph.engine.auth import CALLER, Caller, KeyRing, request_token, trace_id
from algenta_graph.engine.contract import ENGINE_NAME, IMPLEMENTED_TOOLS, NOT_SUPPORTED
from algenta_graph.engine.errors import EngineToolError, GateDenied, InvalidArguments
from algenta_graph.engine.guard import MAX_REQUEST_BYTES, MCP_PATH
from algenta_graph.engine.registry import RegistryTool
from algenta_graph.engine.store import Store
from algenta_graph.engine.tools import GovernedTools, register

logger = logging.getLogger("algenta_graph.engine")

DENIAL_FORMS: tuple[str, ...] = ("mcp-error", "json-body", "sdk")
"""The ``--denials`` wire forms of a refused call (:func:`error_result`)."""


def _text(payload: dict[str, Any]) -> list[mt.ContentBlock]:
    """``payload`` as one JSON text content block."""
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
    """FastMCP plus the engine's call handling.

    The call log, one log line per call, the advertised registry tools, argument checks and the
    ``--denials`` wire form.

    Args:
        store: the engine's store (the call log).
        governed: the implemented tools, registered on this server.
        registry: every tool of the Algenta registry by name (the implemented ones are skipped).
        denials: the wire form of a refused call (:data:`DENIAL_FORMS`).
        host: the host it serves on.
        keys: the engine's API keys (None: none).
    """

    def __init__(
        self,
        *,
        store: Store,
        governed: GovernedTools,
        registry: dict[str, RegistryTool],
        denials: str,
        host: str,
        keys: KeyRing | None = None,
    ) -> None:
        super().__init__(
            name=ENGINE_NAME,
            instructions="A local Algenta-compatible engine: call get_contract first.",
            host=host,
            log_level="WARNING",
            streamable_http_path=MCP_PATH,
            max_request_body_size=MAX_REQUEST_BYTES,
        )
        self._store = store
        self._keys = keys
        self._registry = {n: t for n, t in registry.items() if n not in IMPLEMENTED_TOOLS}
        self._denials = denials
        # The public server (the sdk form) sends text only and advertises no output schema; an
        # MCP client rejects an isError=false result without structuredContent from a tool that
        # advertises one, so the sdk form needs the text-only registration.
        register(self, governed, structured=denials != "sdk")

    async def list_tools(self) -> list[mt.Tool]:
        """The implemented tools, then the rest of the registry."""
        governed = await super().list_tools()
        return governed + [t.to_mcp() for t in self._registry.values()]

    def _check_known_arguments(self, name: str, arguments: dict[str, Any]) -> None:
        """Refuse an argument the tool's schema does not declare (``invalid_arguments``)."""
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

    def _caller(self) -> Caller:
        """Who sent the request being served (its key was checked by :class:`EngineGuard`)."""
        try:
            request = self.get_context().request_context.request
        except (LookupError, ValueError):
            request = None
        scope = getattr(request, "scope", None)
        headers = dict(scope.get("headers") or []) if isinstance(scope, dict) else {}
        key = self._keys.lookup(request_token(headers)) if self._keys else None
        return Caller(key=key, trace_id=trace_id(headers))

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        """Log the call as received, run it, and answer errors in the configured wire form."""
        token = CALLER.set(self._caller())
        try:
            return await self._call_tool(name, arguments)
        finally:
            CALLER.reset(token)

    async def _call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        """Record the call, dispatch it, log one line with its outcome and how long it took."""
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


class _DropClosedStreamNoise(logging.Filter):
    """Drop mcp's traceback for a standalone SSE stream closed by a session's DELETE.

    mcp 1.x logs ``Error in standalone SSE writer`` with an ``anyio.ClosedResourceError`` when a
    client ends its session normally; nothing is wrong, so the engine keeps its log clean.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """False for that one traceback, True for every other record."""
        exc = record.exc_info[1] if record.exc_info else None
        return not (
            record.getMessage() == "Error in standalone SSE writer"
            and isinstance(exc, anyio.ClosedResourceError)
        )


def quiet_mcp_stream_logger() -> None:
    """Drop the closed-stream noise from mcp's streamable HTTP logger (once per process)."""
    mcp_logger = logging.getLogger("mcp.server.streamable_http")
    if not any(isinstance(f, _DropClosedStreamNoise) for f in mcp_logger.filters):
        mcp_logger.addFilter(_DropClosedStreamNoise())
