"""The reference engine: a FastMCP server over streamable HTTP at ``/mcp``, and
:class:`ReferenceEngine`, which runs it on a free port in a background thread.

>>> from algenta_graph.engine import ReferenceEngine
>>> with ReferenceEngine() as engine:                                 # doctest: +SKIP
...     print(engine.url)          # http://127.0.0.1:PORT/mcp, ready for any MCP client
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
import weakref
from collections.abc import Awaitable, Callable, Collection, Mapping, MutableMapping
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import mcp.types as mt
from mcp.server.fastmcp import FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from pydantic import ValidationError

from algenta_graph._net import free_port
from algenta_graph._serve import BackgroundServer, BackgroundService
from algenta_graph.engine.auth import (
    API_KEY_IDENTITY,
    CALLER,
    ROLES,
    ApiKey,
    Caller,
    KeyRing,
    request_token,
    trace_id,
)
from algenta_graph.engine.contract import DEFAULT_RELAXED, IMPLEMENTED_TOOLS, NOT_SUPPORTED
from algenta_graph.engine.dblock import DatabaseLock
from algenta_graph.engine.errors import EngineToolError, GateDenied, InvalidArguments
from algenta_graph.engine.http_api import api_app
from algenta_graph.engine.policy import Policy
from algenta_graph.engine.registry import RegistryTool, registry_names, registry_tools
from algenta_graph.engine.store import Store
from algenta_graph.engine.tools import GovernedTools, register

logger = logging.getLogger("algenta_graph.engine")

DENIAL_FORMS: tuple[str, ...] = ("mcp-error", "json-body", "sdk")
MAX_REQUEST_BYTES = 1024 * 1024
MAX_JSON_DEPTH = 100
MCP_PATH = "/mcp"
API_PREFIX = "/v1"

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
        keys: KeyRing | None = None,
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
        self._keys = keys
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


class EngineGuard:
    """ASGI middleware in front of the whole engine.

    - With API keys, every request to ``/mcp`` (``initialize`` and ``tools/list`` included, so
      a client with a missing or wrong token fails when it connects) needs
      ``Authorization: Bearer <token>`` of a known key (the scheme in any case): otherwise HTTP
      401 ``{"error": {"code": "unauthorized", ...}}``.
    - Every POST body is read once (over :data:`MAX_REQUEST_BYTES`: 413) and, when it is JSON,
      refused with 400 ``invalid_json`` if nested deeper than :data:`MAX_JSON_DEPTH` (a 200k
      ``[`` body would otherwise end in a RecursionError and a traceback).
    """

    def __init__(self, app: ASGIApp, keys: KeyRing | None, api: ASGIApp | None = None) -> None:
        self.app = app
        self._keys = keys
        self._api = api

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        if self._keys and (path == MCP_PATH or path.startswith(MCP_PATH + "/")):
            headers = dict(scope.get("headers") or [])
            if self._keys.lookup(request_token(headers)) is None:
                logger.info(
                    "%s %s refused: HTTP 401 (missing or wrong bearer token)", scope["method"], path
                )
                await _json_response(
                    send,
                    401,
                    _error_body(
                        "unauthorized",
                        "this engine needs the header Authorization: Bearer <api key> (or"
                        " X-API-Key: <api key>)",
                    ),
                    extra_headers=[(b"www-authenticate", b'Bearer realm="algenta"')],
                )
                return
        target = self.app
        if self._api is not None and (path == API_PREFIX or path.startswith(API_PREFIX + "/")):
            target = self._api  # the HTTP API: its routes authenticate and answer themselves
        if scope["method"] != "POST":
            await target(scope, receive, send)
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
                await _json_response(
                    send,
                    413,
                    _error_body(
                        "request_too_large", f"the request body is over {MAX_REQUEST_BYTES} bytes"
                    ),
                )
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        problem = _json_depth_problem(body)
        if problem is not None:
            logger.info("%s %s refused: HTTP 400 (%s)", scope["method"], path, problem)
            await _json_response(send, 400, _error_body("invalid_json", problem))
            return

        await target(scope, replay_body(body, receive), send)


def replay_body(body: bytes, receive: Receive) -> Receive:
    """The ``receive`` to hand the app behind a middleware that has read the whole request
    ``body``: that body once, as one message, then the client's own ``receive`` (its
    disconnect)."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _error_body(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


def _json_depth_problem(body: bytes) -> str | None:
    """Why ``body`` is refused for its nesting, or None (not JSON at all is left to MCP)."""
    try:
        value = json.loads(body)
    except RecursionError:
        return f"the JSON body is nested deeper than {MAX_JSON_DEPTH} levels"
    except ValueError:
        return None
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            return f"the JSON body is nested deeper than {MAX_JSON_DEPTH} levels"
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return None


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
    keys: KeyRing | None = None,
    relaxed: bool = DEFAULT_RELAXED,
) -> ASGIApp:
    """The engine's ASGI app (MCP at ``/mcp``, the approval API at ``/v1/decision-plans``); a
    fresh one per server start. ``api_key`` adds one key (identity ``api-key``, both roles,
    execute enabled) to ``keys``."""
    if denials not in DENIAL_FORMS:
        raise ValueError(f"denials must be one of {', '.join(DENIAL_FORMS)}, got {denials!r}")
    _quiet_mcp_stream_logger()
    ring = combined_keys(keys, api_key)
    executors = [k for k in (ring.api_keys() if ring else []) if k.execute and k.has("agent")]
    if not relaxed and not executors:
        logger.warning(
            "strict mode and no API key with the agent role and execute enabled:"
            " execute_decision is refused for every caller (--keys-file, or --api-key)"
        )
    registry = registry_tools()
    governed = GovernedTools(
        store,
        policy,
        allow_webhook_hosts=allow_webhook_hosts,
        denials=denials,
        auth_required=bool(ring),
        registry_tool_count=sum(len(v) for v in registry_names().values()),
        relaxed=relaxed,
    )
    server = EngineMCP(
        store=store, governed=governed, registry=registry, denials=denials, host=host, keys=ring
    )
    app: ASGIApp = server.streamable_http_app()
    return EngineGuard(app, ring, api=api_app(store, governed, ring))


def combined_keys(keys: KeyRing | None, api_key: str | None) -> KeyRing | None:
    """``keys`` plus the ``--api-key`` key; None when there is no key at all."""
    ring = KeyRing() if keys is None else keys.copy()
    if api_key:
        ring.add_token(api_key, ApiKey(API_KEY_IDENTITY, frozenset(ROLES), execute=True))
    return ring or None


class ReferenceEngine(BackgroundService):
    """The reference engine on ``host:port`` (a free port by default) in a background thread.

    ``db`` is the SQLite file (a temporary one by default, removed when the object is
    collected); state survives a restart on the same file. While it serves, the engine holds the
    file's exclusive lock (``<db>.lock``): a second engine on the same file fails to start with
    :class:`~algenta_graph.engine.dblock.DatabaseInUse`. Use as a sync or async context
    manager, or call :meth:`start` / :meth:`stop` (it can be started again after a stop).

    ``relaxed`` (default :data:`~algenta_graph.engine.contract.DEFAULT_RELAXED`): True keeps only
    the three gates on ``execute_decision``; False enforces the execute profile's requirements
    (keys with roles and execute enabled, a planned and logged decision, an out-of-band approval,
    ``idempotency_key`` and ``nonce``: see ``algenta_graph/engine/README.md``).
    ``keys``: plaintext token -> :class:`~algenta_graph.engine.auth.ApiKey`, or a
    :class:`~algenta_graph.engine.auth.KeyRing`; ``keys_file``: a JSON keys file (sha256 of
    each token); ``api_key``: one more key with both roles and execute enabled.
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
        relaxed: bool = DEFAULT_RELAXED,
        keys: KeyRing | Mapping[str, ApiKey] | None = None,
        keys_file: str | Path | None = None,
    ) -> None:
        if denials not in DENIAL_FORMS:
            raise ValueError(f"denials must be one of {', '.join(DENIAL_FORMS)}, got {denials!r}")
        if not isinstance(relaxed, bool):
            raise ValueError(f"relaxed must be True or False, got {relaxed!r}")
        if port is not None and (isinstance(port, bool) or not 1 <= int(port) <= 65535):
            raise ValueError(f"port must be in 1..65535, got {port!r}")
        self.host = host
        self.port = port if port is not None else free_port(host)
        self.policy = Policy(min_confidence=min_confidence, risk_floor=risk_floor)
        self.api_key = api_key
        self.allow_webhook_hosts = tuple(allow_webhook_hosts)
        self.denials = denials
        self.relaxed = relaxed
        ring = keys if isinstance(keys, KeyRing) or keys is None else KeyRing.from_tokens(keys)
        if keys_file is not None:
            from_file = KeyRing.from_file(keys_file)
            ring = from_file if ring is None else ring.merged(from_file)
        self.keys = ring
        if db is None:
            tmp = tempfile.mkdtemp(prefix="algenta-engine-")
            weakref.finalize(self, shutil.rmtree, tmp, ignore_errors=True)
            db = Path(tmp) / "engine.db"
        self.db_path = Path(db)
        self.store = Store(self.db_path)
        self._lock = DatabaseLock(self.db_path)
        self._server: BackgroundServer | None = None

    @property
    def url(self) -> str:
        """The MCP endpoint, e.g. ``http://127.0.0.1:PORT/mcp``."""
        return f"http://{self.host}:{self.port}/mcp"

    def start(self) -> ReferenceEngine:
        if self.running:
            return self
        self._lock.acquire()  # DatabaseInUse when another engine serves this file
        try:
            app = create_app(
                store=self.store,
                policy=self.policy,
                host=self.host,
                api_key=self.api_key,
                allow_webhook_hosts=self.allow_webhook_hosts,
                denials=self.denials,
                keys=self.keys,
                relaxed=self.relaxed,
            )
            self._server = BackgroundServer(
                app, host=self.host, port=self.port, name=f"algenta-engine-{self.port}"
            )
            self._server.start()
        except BaseException:
            self._server = None
            self._lock.release()
            raise
        logger.info(
            "reference engine serving %s (db %s, %s)",
            self.url,
            self.db_path,
            "relaxed" if self.relaxed else "strict",
        )
        return self

    def stop(self) -> None:
        super().stop()
        self._lock.release()

    @property
    def approve_url(self) -> str:
        """``http://host:port/v1/decision-plans/{plan_id}/approve`` (format ``plan_id``)."""
        return f"http://{self.host}:{self.port}/v1/decision-plans/{{plan_id}}/approve"

    def call_log(self) -> list[dict[str, Any]]:
        """Every tools/call the engine received, oldest first: name and arguments as sent."""
        return self.store.call_log()

    def executions(self, decision_id: str | None = None) -> list[dict[str, Any]]:
        """Executions (receipt fields + force, override_safety, metadata), oldest first."""
        return self.store.executions(decision_id)
