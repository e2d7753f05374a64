"""One connection to an Algenta engine: a persistent MCP session, the governed tool catalog,
the interceptor that guards every model-originated call, and the operator path.

``EngineConnection`` holds **one** MCP session per server over streamable HTTP
(``MultiServerMCPClient.session(...)``), opened once and kept inside one dedicated asyncio task
(anyio cancel scopes must be exited by the task that entered them), instead of the adapters'
default of a new session for every tool call. Its catalog (:attr:`EngineConnection.tools`) is
built with ``load_mcp_tools`` and holds

* the engine's tools admitted by the active profile (``observe`` by default), with ``force`` and
  ``override_safety`` removed from every schema (properties, ``required``, nested objects,
  ``$defs``);
* the tools of any ``extra_servers``, under their own names, prefixed ``<server>_`` only when
  the name is taken (an extra server never lends its tools Algenta's trust).

Every call from the catalog passes :class:`~algenta_graph.governance.GovernanceInterceptor` (the
security policy lives in :mod:`algenta_graph.governance`): a tool outside the profile is refused
without contacting the engine, and ``force`` / ``override_safety`` are removed from the
arguments; nothing else changes. The
operator path, :meth:`EngineConnection.execute_as_operator`, is not a tool and is never bound to a
model: it sends the flags an operator approved, over the same session.

Connection problems raise :class:`~algenta_graph.errors.EngineConnectionError` naming the URL
(:class:`~algenta_graph.errors.EngineAuthError` for HTTP 401,
:class:`~algenta_graph.errors.EngineTimeoutError` for timeouts). A session that died (the engine
was stopped or killed) fails the call in flight; the next call opens a new session.

How failures surface through mcp 1.x's streamable-HTTP client (measured, and each one tested in
``tests/test_connection.py``): an ``httpx`` error on a POST (connection refused, HTTP 401 or
500) is raised inside the transport's task group, so the session's ``async with`` ends with an
``ExceptionGroup`` in the task holding it, while the request that triggered it is left waiting
for its read timeout. Every request therefore runs as its own task raced against the holding
task, and the group is flattened to its first meaningful leaf. A body that is not JSON-RPC
reaches the session's ``message_handler`` as an exception. A request timeout is an ``McpError``
with code 408. A server restarted between two calls answers HTTP 404 to the old session id,
which arrives as ``McpError("Session terminated")``; that request never ran, so it is sent once
more on a new session.

Example (against a local reference engine)::

    async with EngineConnection("http://127.0.0.1:8000/mcp", profile="execute") as conn:
        msg = await conn.call_tool("get_contract", {}, tool_call_id="call_1")
        outcome = await conn.execute_as_operator("dec_1", "https://hooks.example/x", force=True)
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import httpx
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool
from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_mcp_adapters.tools import load_mcp_tools
from mcp import ClientSession
from mcp.shared.exceptions import McpError
from mcp.types import CONNECTION_CLOSED, CallToolResult, ListToolsResult, Tool
from pydantic import ValidationError

from algenta_graph.contract import (
    Profile,
    load_contract,
    resolve_profile,
)
from algenta_graph.errors import (
    AlgentaGraphError,
    EngineAuthError,
    EngineConnectionError,
    EngineTimeoutError,
    ToolNotInProfileError,
)
from algenta_graph.governance import GovernanceInterceptor, scrub_schema, strip_graph_supplied
from algenta_graph.outcomes import ExecutionOutcome, parse_execution_outcome, tool_result_json

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup

__all__ = [
    "ALGENTA_SERVER",
    "DEFAULT_BASE_URL",
    "EngineConnection",
    "resolve_base_url",
]

logger = logging.getLogger(__name__)

DEFAULT_BASE_URL = "http://localhost:8000/mcp"
"""Where the engine is looked for when neither ``base_url=`` nor ``ALGENTA_BASE_URL`` is set."""
ALGENTA_SERVER = "algenta"
"""The server name of the Algenta engine among the connection's MCP servers."""
OPERATOR_SERVER = "algenta-operator"
"""The operator path's own session to the engine, with the operator credential."""
ENV_OPERATOR_API_KEY = "ALGENTA_OPERATOR_API_KEY"
EXECUTE_TOOL = "execute_decision"
GET_DECISION_TOOL = "get_decision"
_RESERVED_NAMES = frozenset({"search_tools"})  # the graph's own gateway tool
_CLOSE_TIMEOUT = 5.0


def resolve_base_url(base_url: str | None = None) -> str:
    """``base_url``, else ``ALGENTA_BASE_URL``, else :data:`DEFAULT_BASE_URL`."""
    url = base_url or os.environ.get("ALGENTA_BASE_URL") or DEFAULT_BASE_URL
    return url.strip()


# --------------------------------------------------------------------------- errors


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    """The exceptions inside ``exc``: group members, causes and contexts, depth first."""
    seen: set[int] = set()
    stack = [exc]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, BaseExceptionGroup):
            stack.extend(reversed(current.exceptions))
            continue
        yield current
        for linked in (current.__cause__, current.__context__):
            if linked is not None:
                stack.append(linked)


def _is_timeout(exc: BaseException) -> bool:
    return isinstance(exc, httpx.TimeoutException | TimeoutError) or (
        isinstance(exc, McpError) and exc.error.code == httpx.codes.REQUEST_TIMEOUT
    )


def _is_closed(exc: BaseException) -> bool:
    return isinstance(exc, McpError) and exc.error.code == CONNECTION_CLOSED


def _is_forgotten(exc: BaseException) -> bool:
    """The server answered HTTP 404 to the session id: it restarted and never ran the request."""
    return isinstance(exc, McpError) and exc.error.message == "Session terminated"


def _is_late_answer(exc: BaseException) -> bool:
    """mcp's report of an answer to a request it no longer waits for (it timed out)."""
    return isinstance(exc, RuntimeError) and "unknown request ID" in str(exc)


class _SessionForgotten(Exception):
    pass


# --------------------------------------------------------------------------- sessions


class _WatchedStream(httpx.AsyncByteStream):
    """A response body that reports a connection lost mid-answer before re-raising it.

    mcp's client swallows such an error on a POST's SSE answer and leaves the request waiting
    for its read timeout; reporting it ends the session so the call fails at once.
    """

    def __init__(self, inner: Any, on_lost: Callable[[BaseException], None]) -> None:
        self._inner = inner
        self._on_lost = on_lost

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._inner:
                yield chunk
        except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
            self._on_lost(exc)
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()


class _WatchedTransport(httpx.AsyncBaseTransport):
    def __init__(
        self, inner: httpx.AsyncBaseTransport, on_lost: Callable[[BaseException], None]
    ) -> None:
        self._inner = inner
        self._on_lost = on_lost

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        if request.method == "POST":  # the answers to our requests, not the GET event stream
            response.stream = _WatchedStream(response.stream, self._on_lost)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


@dataclass
class _Server:
    """One MCP server of the connection and its persistent session.

    The session is entered and exited by one dedicated task (``_hold``); calls from any task use
    it. When the task ends (the server went away, or a protocol error broke the stream) the
    session is gone and :meth:`session` opens a new one.
    """

    name: str
    url: str
    client: MultiServerMCPClient
    open_timeout: float
    redact: Callable[[str], str]
    session_value: ClientSession | None = None
    task: asyncio.Task[None] | None = None
    failure: BaseException | None = None
    opened: int = 0
    _stop: asyncio.Event | None = None
    _ready: asyncio.Future[ClientSession] | None = None
    _lock: asyncio.Lock | None = None
    _broken: list[BaseException] = field(default_factory=list)

    async def on_message(self, message: Any) -> None:
        """ClientSession message handler: a transport exception breaks the session.

        The late answer to a request that already timed out is not one: mcp reports it as a
        ``RuntimeError`` ("unknown request ID") and the session stays sound.
        """
        if isinstance(message, Exception):
            if _is_late_answer(message):
                logger.debug("late answer from %s ignored: %s", self.name, message)
                return
            self.broken(message)

    def broken(self, exc: BaseException) -> None:
        """The session can no longer be trusted: end it (calls in flight fail with ``exc``)."""
        logger.debug("MCP stream error from %s: %r", self.name, exc)
        self._broken.append(exc)
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(exc)
        elif self._stop is not None:
            self._stop.set()

    def http_client(
        self,
        headers: dict[str, str] | None = None,
        timeout: httpx.Timeout | None = None,
        auth: httpx.Auth | None = None,
    ) -> httpx.AsyncClient:
        """The adapters' ``httpx_client_factory``: an ``AsyncClient`` whose POST responses are
        watched, so a connection lost in the middle of an answer ends the session at once."""
        return httpx.AsyncClient(
            headers=headers,
            timeout=timeout,
            auth=auth,
            transport=_WatchedTransport(httpx.AsyncHTTPTransport(), self.broken),
        )

    @property
    def alive(self) -> bool:
        return self.session_value is not None and self.task is not None and not self.task.done()

    async def session(self) -> ClientSession:
        """The live session, opening a new one when there is none."""
        if self.alive:
            assert self.session_value is not None
            return self.session_value
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if not self.alive:
                await self._open()
            assert self.session_value is not None
            return self.session_value

    async def _open(self) -> None:
        await self._finish_task()
        self.failure = None
        self._broken.clear()
        loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._ready = loop.create_future()
        self.task = loop.create_task(self._hold(self._ready, self._stop), name=f"mcp-{self.name}")
        try:
            self.session_value = await asyncio.wait_for(
                asyncio.shield(self._ready), self.open_timeout + 5.0
            )
        except BaseException as exc:
            await self._finish_task(cancel=True)
            if self._ready.done() and not self._ready.cancelled():
                self._ready.exception()  # retrieved here; translated below
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise self.translate(exc, "connecting") from None
        self.opened += 1

    async def _hold(self, ready: asyncio.Future[ClientSession], stop: asyncio.Event) -> None:
        try:
            async with self.client.session(self.name) as session:
                if not ready.done():
                    ready.set_result(session)
                await stop.wait()
        except BaseException as exc:  # recorded for the call that finds the session dead
            self.failure = exc
            if not ready.done():
                ready.set_exception(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self.session_value = None
            if not ready.done():
                ready.set_exception(
                    EngineConnectionError(
                        f"the session to {self.label} at {self.url} closed before it was ready",
                        url=self.url,
                    )
                )
            if self._broken and self.failure is None:
                self.failure = self._broken[0]

    async def _finish_task(self, *, cancel: bool = False) -> None:
        task, self.task = self.task, None
        self.session_value = None
        if task is None:
            return
        if self._stop is not None:
            self._stop.set()
        if cancel:
            task.cancel()
        done, _ = await asyncio.wait({task}, timeout=_CLOSE_TIMEOUT)
        if not done:
            task.cancel()
            await asyncio.wait({task}, timeout=_CLOSE_TIMEOUT)
        if task.done() and not task.cancelled():
            task.exception()  # retrieved: it is recorded in self.failure

    def end(self) -> None:
        """Let the holding task leave the session; the next :meth:`session` opens a new one."""
        self.session_value = None
        if self._stop is not None:
            self._stop.set()

    async def close(self) -> None:
        await self._finish_task()

    async def cause_of_death(self) -> BaseException | None:
        """Wait briefly for the holding task to end and return what ended it."""
        task = self.task
        if task is not None and not task.done():
            await asyncio.wait({task}, timeout=2.0)
        return self.failure or (self._broken[0] if self._broken else None)

    @property
    def label(self) -> str:
        """How messages name this server: the Algenta engine, or an extra MCP server."""
        if self.name == ALGENTA_SERVER:
            return "the Algenta engine"
        if self.name == OPERATOR_SERVER:
            return "the Algenta engine (operator credential)"
        return f"MCP server {self.name!r}"

    def timeout_error(self, what: str, seconds: float, option: str) -> EngineTimeoutError:
        return EngineTimeoutError(
            f"timed out: {self.label} at {self.url} did not answer within {seconds:g} s while "
            f"{what} (raise {option}= if it is just slow).",
            url=self.url,
        )

    def translate(self, exc: BaseException, what: str) -> EngineConnectionError:
        """One typed error naming the URL for whatever the MCP client raised."""
        checks = (
            f"Check: (1) the URL {self.url} (base_url= or ALGENTA_BASE_URL); (2) that the engine "
            "is running there (e.g. `algenta-graph engine --port 8000`); (3) the API token "
            "(api_key= or ALGENTA_API_KEY)."
        )
        leaves = list(_leaves(exc))
        for leaf in leaves:
            if isinstance(leaf, EngineConnectionError):
                return leaf
        for leaf in leaves:
            if isinstance(leaf, httpx.HTTPStatusError):
                status = leaf.response.status_code
                if status == 401:
                    return EngineAuthError(
                        f"{self.label} at {self.url} rejected the API token (HTTP 401) while "
                        f"{what}: pass a valid token with api_key= or ALGENTA_API_KEY.",
                        url=self.url,
                    )
                reason = leaf.response.reason_phrase or ""
                return EngineConnectionError(
                    f"{self.label} at {self.url} answered HTTP {status} {reason} while {what}; "
                    f"is that an MCP endpoint? {checks}",
                    url=self.url,
                )
        for leaf in leaves:
            if _is_timeout(leaf):
                return self.timeout_error(what, self.open_timeout, "timeout")
        for leaf in leaves:
            if isinstance(leaf, httpx.RemoteProtocolError | httpx.ReadError):
                detail = self.redact(str(leaf)) or type(leaf).__name__
                return EngineConnectionError(
                    f"lost the connection to {self.label} at {self.url} while {what} "
                    f"({detail}); the engine may or may not have acted on the request (read "
                    "its record before retrying). The next call reconnects.",
                    url=self.url,
                )
        for leaf in leaves:
            if isinstance(leaf, httpx.TransportError | OSError):
                detail = self.redact(str(leaf)) or type(leaf).__name__
                return EngineConnectionError(
                    f"cannot reach {self.label} at {self.url} while {what} ({detail}). {checks}",
                    url=self.url,
                )
        for leaf in leaves:
            if isinstance(leaf, ValidationError):
                return EngineConnectionError(
                    f"{self.label} at {self.url} sent an answer that is not an MCP JSON-RPC "
                    f"message while {what}; is that an MCP endpoint? {checks}",
                    url=self.url,
                )
        first = leaves[0] if leaves else exc
        detail = " ".join(self.redact(str(first)).split())[:300] or type(first).__name__
        return EngineConnectionError(
            f"the connection to {self.label} at {self.url} failed while {what} "
            f"({type(first).__name__}: {detail}). {checks}",
            url=self.url,
        )


class _SessionView:
    """What ``load_mcp_tools`` sees as the session: the server's tool list, filtered and
    scrubbed, and calls sent over the server's current live session (so the tools keep working
    after a reconnect)."""

    def __init__(self, conn: EngineConnection, server: _Server, keep: Callable[[Tool], bool]):
        self._conn = conn
        self._server = server
        self._keep = keep
        self.advertised: list[str] = []

    async def list_tools(self, cursor: str | None = None) -> ListToolsResult:
        session = await self._server.session()
        page = await self._conn._guard(self._server, "listing tools", session.list_tools(cursor))
        self.advertised.extend(t.name for t in page.tools)
        kept = [
            t.model_copy(update={"inputSchema": self._model_facing(t)})
            for t in page.tools
            if self._keep(t)
        ]
        return page.model_copy(update={"tools": kept})

    def _model_facing(self, tool: Tool) -> dict[str, Any]:
        schema = scrub_schema(tool.inputSchema)
        if tool.name == EXECUTE_TOOL and self._server.name == ALGENTA_SERVER:
            schema, self._conn.execute_supplied = strip_graph_supplied(schema)
        return schema

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        read_timeout_seconds: timedelta | None = None,
        progress_callback: Any = None,
        **_: Any,
    ) -> CallToolResult:
        return await self._conn._send(self._server, name, arguments or {}, progress_callback)


# --------------------------------------------------------------------------- the connection


class EngineConnection:
    """One persistent connection to an Algenta engine (plus optional extra MCP servers).

    Args:
        base_url: the engine's MCP endpoint; default ``ALGENTA_BASE_URL``, then
            ``http://localhost:8000/mcp``.
        api_key: sent as ``Authorization: Bearer <api_key>``; default ``ALGENTA_API_KEY``. Never
            logged, never in an error message.
        profile: the tool profile (a name from the contract, or a :class:`Profile`); default
            ``"observe"``.
        extra_servers: ``{"name": connection}`` in ``langchain-mcp-adapters`` form; their tools
            join the catalog (not governed by the profile, never trusted as Algenta's).
        timeout: seconds for connecting, initialising and listing tools.
        call_timeout: seconds one tool call may take.
        operator_api_key: the credential of the **operator path** only (an engine key with the
            operator role, ``docs/ARCHITECTURE.md`` invariant 14); default
            ``ALGENTA_OPERATOR_API_KEY``. The override flags are sent over a session of its
            own with this key, after an operator's answer; the model's calls never use it.
            Without it the operator path uses ``api_key``, which an engine that requires an
            operator for overrides refuses (recorded as a failed override).
    """

    def __init__(
        self,
        base_url: str | None = None,
        *,
        api_key: str | None = None,
        profile: str | Profile = "observe",
        extra_servers: Mapping[str, Mapping[str, Any]] | None = None,
        timeout: float = 30.0,
        call_timeout: float = 60.0,
        operator_api_key: str | None = None,
    ) -> None:
        if timeout <= 0 or call_timeout <= 0:
            raise ValueError(f"timeouts must be positive, got {timeout=} {call_timeout=}")
        self.url: str = resolve_base_url(base_url)
        self.profile: Profile = resolve_profile(profile)
        self.timeout = float(timeout)
        self.call_timeout = float(call_timeout)
        token = api_key if api_key is not None else os.environ.get("ALGENTA_API_KEY")
        self.__token = token or None
        operator = (
            operator_api_key
            if operator_api_key is not None
            else os.environ.get(ENV_OPERATOR_API_KEY)
        )
        self.__operator_token = operator or None
        extras = dict(extra_servers or {})
        for reserved in (ALGENTA_SERVER, OPERATOR_SERVER):
            if reserved in extras:
                raise ValueError(
                    f"extra server name {reserved!r} is reserved for the Algenta engine"
                )
        for name, spec in extras.items():
            if not isinstance(spec, Mapping) or "transport" not in spec:
                raise ValueError(f"extra server {name!r}: a connection dict with 'transport'")
        self._extra_specs = extras
        self._servers: dict[str, _Server] = {}
        self._tools: dict[str, BaseTool] = {}
        self._algenta_names: frozenset[str] = frozenset()
        self._advertised: frozenset[str] = frozenset()
        self.execute_supplied: frozenset[str] = frozenset()
        """Which graph-supplied fields (``idempotency_key``, ``nonce``) the engine's
        ``execute_decision`` declares: the graph sends exactly those, never the model."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    def __repr__(self) -> str:
        auth = "token" if self.__token else "no token"
        if self.__operator_token:
            auth += ", operator token"
        return f"EngineConnection({self.url!r}, profile={self.profile.name!r}, {auth})"

    # ------------------------------------------------------------------ lifecycle

    def _redact(self, text: str) -> str:
        for secret in (self.__token, self.__operator_token):
            if secret:
                text = text.replace(secret, "[redacted]")
        return text

    @property
    def has_operator_credential(self) -> bool:
        """Whether the operator path has its own engine credential (``operator_api_key``)."""
        return self.__operator_token is not None

    def _connection_specs(self) -> dict[str, dict[str, Any]]:
        read = max(300.0, self.call_timeout + self.timeout)  # must outlive any call
        specs: dict[str, dict[str, Any]] = {
            ALGENTA_SERVER: {
                "transport": "streamable_http",
                "url": self.url,
                "timeout": self.timeout,
                "sse_read_timeout": read,
                "session_kwargs": {},
            }
        }
        if self.__token:
            specs[ALGENTA_SERVER]["headers"] = {"Authorization": f"Bearer {self.__token}"}
        if self.__operator_token:  # opened on the first operator call only
            specs[OPERATOR_SERVER] = {
                **specs[ALGENTA_SERVER],
                "headers": {"Authorization": f"Bearer {self.__operator_token}"},
                "session_kwargs": {},
            }
        for name, spec in self._extra_specs.items():
            specs[name] = {**spec, "session_kwargs": dict(spec.get("session_kwargs") or {})}
        return specs

    async def open(self) -> EngineConnection:
        """Open the sessions and build the catalog (idempotent). Raises EngineConnectionError."""
        if self._servers:
            return self
        if self._closed:
            raise AlgentaGraphError("this EngineConnection was closed; create a new one")
        self._loop = asyncio.get_running_loop()
        specs = self._connection_specs()
        client = MultiServerMCPClient(specs)  # type: ignore[arg-type]
        for name, spec in specs.items():
            url = str(spec.get("url") or spec.get("command") or name)
            server = _Server(name, url, client, self.timeout, self._redact)
            spec["session_kwargs"].setdefault(
                "read_timeout_seconds", timedelta(seconds=self.timeout)
            )
            spec["session_kwargs"].setdefault("message_handler", server.on_message)
            if spec["transport"] in ("streamable_http", "streamable-http", "http", "sse"):
                spec.setdefault("httpx_client_factory", server.http_client)
            self._servers[name] = server
        try:
            await self._build_catalog()
        except BaseException:
            await self.aclose()
            self._closed = False
            raise
        return self

    async def _build_catalog(self) -> None:
        algenta = self._servers[ALGENTA_SERVER]
        view = _SessionView(self, algenta, lambda t: self.profile.allows(t.name))
        tools = await load_mcp_tools(
            view,  # type: ignore[arg-type]
            tool_interceptors=[GovernanceInterceptor(self.profile)],
            server_name=ALGENTA_SERVER,
        )
        catalog = {t.name: t for t in tools}
        self._advertised = frozenset(view.advertised)
        self._algenta_names = frozenset(catalog)
        taken = set(self._advertised) | set(load_contract().get("mcp_tool_reference", {}))
        taken |= _RESERVED_NAMES | set(catalog)
        for name, server in self._servers.items():
            if name in (ALGENTA_SERVER, OPERATOR_SERVER):
                continue
            extra_view = _SessionView(self, server, lambda t: True)
            extra_tools = await load_mcp_tools(
                extra_view,  # type: ignore[arg-type]
                tool_interceptors=[GovernanceInterceptor(None)],
                server_name=name,
            )
            for tool in extra_tools:
                final = tool.name
                if final in taken:
                    final = f"{name}_{tool.name}"
                    n = 2
                    while final in taken:
                        final, n = f"{name}_{tool.name}_{n}", n + 1
                    tool.name = final
                taken.add(final)
                catalog[final] = tool
        self._tools = catalog

    async def aclose(self) -> None:
        """Close every session (idempotent)."""
        servers, self._servers = list(self._servers.values()), {}
        self._closed = True
        for server in servers:
            try:
                await server.close()
            except Exception:  # closing must not mask the caller's own error
                logger.debug("closing the session to %s failed", server.name, exc_info=True)

    async def __aenter__(self) -> EngineConnection:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ catalog

    @property
    def tools(self) -> list[BaseTool]:
        """The model-facing catalog: the profile's Algenta tools (scrubbed) + extra servers'."""
        return list(self._tools.values())

    @property
    def advertised_tool_names(self) -> frozenset[str]:
        """Every tool name the engine advertised, inside and outside the profile."""
        return self._advertised

    def get_tool(self, name: str) -> BaseTool | None:
        """The catalog tool called ``name`` (its final name), or None."""
        return self._tools.get(name)

    def is_algenta_tool(self, name: str) -> bool:
        """True only for the Algenta engine's own catalog tools, never an extra server's."""
        return name in self._algenta_names

    @property
    def sessions_opened(self) -> int:
        """How many MCP sessions this connection has opened so far (reconnects included)."""
        return sum(s.opened for s in self._servers.values())

    # ------------------------------------------------------------------ calls

    def _server(self, name: str) -> _Server:
        if not self._servers:
            raise AlgentaGraphError(
                "the EngineConnection is not open: use `async with EngineConnection(...)` "
                "or `await conn.open()` first"
            )
        if self._loop is not None and asyncio.get_running_loop() is not self._loop:
            raise AlgentaGraphError(
                "the EngineConnection was opened in another event loop; open one per loop"
            )
        return self._servers[name]

    async def _guard(self, server: _Server, what: str, call: Coroutine[Any, Any, Any]) -> Any:
        """Await an MCP request; translate what the client raises into a typed error.

        The request runs as its own task raced against the session's holding task: when the
        transport fails (connection refused, HTTP 401/500, ...) the mcp client ends the session
        but leaves the request waiting for its read timeout, so the session's end is the signal.
        """
        holder = server.task
        request = asyncio.ensure_future(call)
        try:
            await asyncio.wait(
                {request} if holder is None else {request, holder},
                return_when=asyncio.FIRST_COMPLETED,
            )
        except asyncio.CancelledError:
            request.cancel()
            raise
        if not request.done():
            request.cancel()
            await asyncio.wait({request})
            cause = await server.cause_of_death()
            ended = EngineConnectionError(
                f"the session to {server.label} at {server.url} ended while {what} (the "
                "connection was closed); the next call reconnects",
                url=server.url,
            )
            raise server.translate(cause or ended, what) from None
        try:
            return request.result()
        except McpError as exc:
            if _is_timeout(exc):
                raise server.timeout_error(
                    what,
                    self._timeout_for(what),
                    "call_timeout" if what.startswith("calling") else "timeout",
                ) from None
            if _is_forgotten(exc):
                server.failure = exc
                server.end()
                raise _SessionForgotten() from None
            if _is_closed(exc):
                cause = await server.cause_of_death()
                raise server.translate(cause or exc, what) from None
            raise AlgentaGraphError(
                f"{server.label} at {server.url} answered with JSON-RPC error "
                f"{exc.error.code} while {what}: {self._redact(exc.error.message)}"
            ) from None
        except (httpx.HTTPError, OSError, BaseExceptionGroup) as exc:
            raise server.translate(exc, what) from None

    def _timeout_for(self, what: str) -> float:
        return self.call_timeout if what.startswith("calling") else self.timeout

    async def _send(
        self,
        server: _Server,
        name: str,
        arguments: dict[str, Any],
        progress_callback: Any = None,
    ) -> CallToolResult:
        """One tools/call over the server's live session (reconnecting when it died)."""
        self._server(server.name)  # open and in this loop
        what = f"calling tool {name!r}"  # _timeout_for keys on "calling"
        for attempt in (1, 2):
            session = await server.session()
            try:
                result: CallToolResult = await self._guard(
                    server,
                    what,
                    session.call_tool(
                        name,
                        arguments,
                        read_timeout_seconds=timedelta(seconds=self.call_timeout),
                        progress_callback=progress_callback,
                    ),
                )
                return result
            except _SessionForgotten:
                # The server answered 404 to our session id: it restarted and never saw the
                # request, so sending it once more on a new session is safe.
                if attempt == 2:
                    break
        raise EngineConnectionError(
            f"{server.label} at {server.url} does not accept this client's sessions (it "
            "answers HTTP 404 to every new session id)",
            url=server.url,
        )

    async def call_tool(
        self, name: str, args: Mapping[str, Any], *, tool_call_id: str
    ) -> ToolMessage:
        """Call a catalog tool as the model would: profile guard, argument scrub, one session.

        Returns the adapters' ``ToolMessage`` (content blocks; ``artifact["structured_content"]``
        holds structuredContent; ``status="error"`` for an MCP error result). A name outside
        the catalog raises :class:`ToolNotInProfileError` and nothing is sent.
        """
        self._server(ALGENTA_SERVER)
        tool = self._tools.get(name)
        if tool is None:
            raise ToolNotInProfileError(name, self.profile.name)
        if not isinstance(args, Mapping):
            raise AlgentaGraphError(f"arguments of {name!r} must be an object, got {args!r}")
        message = await tool.ainvoke(
            {"type": "tool_call", "name": name, "args": dict(args), "id": tool_call_id}
        )
        if not isinstance(message, ToolMessage):  # pragma: no cover - the adapters' contract
            raise AlgentaGraphError(f"tool {name!r} returned {type(message).__name__}")
        return message

    async def _raw_call(self, name: str, arguments: dict[str, Any]) -> CallToolResult:
        return await self._send(self._server(ALGENTA_SERVER), name, arguments)

    async def execute_as_operator(
        self,
        decision_id: str,
        webhook_url: str,
        *,
        force: bool = False,
        override_safety: bool = False,
        timeout_seconds: float | None = None,
        metadata: Mapping[str, Any] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> ExecutionOutcome:
        """The operator path: ``execute_decision`` with the flags an operator approved.

        Not a tool and never bound to a model; it bypasses the scrub (and the profile) and
        returns the parsed outcome. ``extra``: the graph-supplied arguments (idempotency key,
        nonce). Connection problems raise EngineConnectionError.
        """
        if not isinstance(decision_id, str) or not decision_id:
            raise ValueError(f"decision_id must be a non-empty string, got {decision_id!r}")
        if not isinstance(webhook_url, str) or not webhook_url:
            raise ValueError(f"webhook_url must be a non-empty string, got {webhook_url!r}")
        arguments: dict[str, Any] = {
            "decision_id": decision_id,
            "webhook_url": webhook_url,
            "force": bool(force),
            "override_safety": bool(override_safety),
        }
        if timeout_seconds is not None:
            arguments["timeout_seconds"] = timeout_seconds
        if metadata is not None:
            arguments["metadata"] = dict(metadata)
        arguments.update(extra or {})
        server = self._server(
            OPERATOR_SERVER if OPERATOR_SERVER in self._servers else ALGENTA_SERVER
        )
        return parse_execution_outcome(await self._send(server, EXECUTE_TOOL, arguments))

    async def get_decision(self, decision_id: str) -> dict[str, Any]:
        """The engine's record of a decision and its executions (internal, read-only; outside
        the profile guard). Raises AlgentaGraphError when the engine answers with an error."""
        result = await self._raw_call(GET_DECISION_TOOL, {"decision_id": decision_id})
        body = tool_result_json(result)
        if result.isError or not isinstance(body, Mapping) or "error" in body:
            detail = json.dumps(body, default=str) if body is not None else "no JSON body"
            raise AlgentaGraphError(
                f"get_decision({decision_id!r}) on {self.url} failed: {detail[:500]}"
            )
        return dict(body)
