"""The MCP transport of an engine connection: one persistent session per server.

Whatever the MCP client raises becomes a typed error naming the URL
(:mod:`algenta_graph.connection.failures`); the HTTP client under each session is
:mod:`algenta_graph.connection.watched_http`.

How failures surface through mcp 1.x's streamable-HTTP client (measured, and each one tested in
``tests/integration/test_connection.py``): an ``httpx`` error on a POST (connection refused,
HTTP 401 or 500) is raised inside the transport's task group, so the session's ``async with``
ends with an ``ExceptionGroup`` in the task holding it, while the request that triggered it is
left waiting for its read timeout. Every request therefore runs as its own task raced against
the holding task (:meth:`ServerSession.guard`), and the group is flattened to its first
meaningful leaf. A body that is not JSON-RPC reaches the session's ``message_handler`` as an
exception. A request timeout is an ``McpError`` with code 408. A server restarted between two
calls answers HTTP 404 to the old session id, which arrives as ``McpError("Session
terminated")``; that request never ran, so it is sent once more on a new session
(:meth:`ServerSession.send`).

The session is held inside one dedicated asyncio task (anyio cancel scopes must be exited by
the task that entered them), instead of the adapters' default of a new session per tool call.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

import httpx
from langchain_mcp_adapters.client import MultiServerMCPClient
from mcp import ClientSession
from mcp.shared.exceptions import McpError
from mcp.types import CallToolResult

from algenta_graph.connection.failures import (
    SessionForgotten,
    is_closed,
    is_forgotten,
    is_late_answer,
    is_timeout,
    lost_call,
    timeout_error,
    translate,
)
from algenta_graph.connection.watched_http import watched_client
from algenta_graph.errors import AlgentaGraphError, EngineConnectionError

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup

__all__ = ["ALGENTA_SERVER", "OPERATOR_SERVER", "ServerSession"]

logger = logging.getLogger(__name__)

ALGENTA_SERVER = "algenta"
"""The server name of the Algenta engine among the connection's MCP servers."""
OPERATOR_SERVER = "algenta-operator"
"""The operator path's own session to the engine, with the operator credential."""
_CLOSE_TIMEOUT = 5.0
_T = TypeVar("_T")


@dataclass
class ServerSession:
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
    call_timeout: float = 60.0
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
            if is_late_answer(message):
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
        """The adapters' ``httpx_client_factory``: an ``AsyncClient`` that watches its POSTs.

        A connection lost in the middle of a POST's answer ends the session at once.
        """
        return watched_client(self.broken, headers, timeout, auth)

    @property
    def alive(self) -> bool:
        """Whether there is a session and its holding task still runs."""
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
        """Let the holding task leave the session and wait for it (cancelled if it lingers)."""
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

    def translate(
        self, exc: BaseException, what: str, tool: str | None = None
    ) -> EngineConnectionError:
        """One typed error naming the URL for whatever the MCP client raised (see ``failures``).

        ``tool``: the tool whose call was sent (a loss is then a ``ToolCallLostError``).
        """
        return translate(
            exc,
            what,
            label=self.label,
            url=self.url,
            open_timeout=self.open_timeout,
            redact=self.redact,
            tool=tool,
        )

    async def guard(
        self, what: str, call: Coroutine[Any, Any, _T], *, tool: str | None = None
    ) -> _T:
        """Await an MCP request; translate what the client raises into a typed error.

        The request runs as its own task raced against the session's holding task: when the
        transport fails (connection refused, HTTP 401/500, a connection lost or an answer
        stream ended without the answer: :mod:`~algenta_graph.connection.watched_http`) the
        mcp client ends the session but leaves the request waiting for its read timeout, so
        the session's end is the signal. ``tool``: the tool this request calls; a call whose
        connection is lost after it was sent fails at once with
        :class:`~algenta_graph.errors.ToolCallLostError` (it may have run), and one that times
        out says it may have run.
        """
        holder = self.task
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
            cause = await self.cause_of_death()
            if cause is None:
                closed = "the session ended: the connection was closed"
                if tool is not None:
                    raise lost_call(self.label, self.url, what, tool, closed) from None
                cause = EngineConnectionError(
                    f"{closed} to {self.label} at {self.url} while {what}; the next call "
                    "reconnects",
                    url=self.url,
                )
            raise self.translate(cause, what, tool) from None
        try:
            return request.result()
        except McpError as exc:
            if is_timeout(exc):
                if tool is None:
                    raise timeout_error(
                        self.label, self.url, what, self.open_timeout, "timeout"
                    ) from None
                raise timeout_error(
                    self.label, self.url, what, self.call_timeout, "call_timeout", call=True
                ) from None
            if is_forgotten(exc):
                self.failure = exc
                self.end()
                raise SessionForgotten() from None
            if is_closed(exc):
                cause = await self.cause_of_death()
                raise self.translate(cause or exc, what, tool) from None
            raise AlgentaGraphError(
                f"{self.label} at {self.url} answered with JSON-RPC error "
                f"{exc.error.code} while {what}: {self.redact(exc.error.message)}"
            ) from None
        except (httpx.HTTPError, OSError, BaseExceptionGroup) as exc:
            raise self.translate(exc, what, tool) from None

    async def send(
        self,
        name: str,
        arguments: dict[str, Any],
        progress_callback: Any = None,
        *,
        meta: dict[str, Any] | None = None,
    ) -> CallToolResult:
        """One tools/call over the server's live session (reconnecting when it died).

        ``meta`` is the request's ``params._meta`` (the W3C trace context of the call's span).
        """
        what = f"calling tool {name!r}"
        for attempt in (1, 2):
            session = await self.session()
            try:
                result: CallToolResult = await self.guard(
                    what,
                    session.call_tool(
                        name,
                        arguments,
                        read_timeout_seconds=timedelta(seconds=self.call_timeout),
                        progress_callback=progress_callback,
                        meta=meta,
                    ),
                    tool=name,
                )
                return result
            except SessionForgotten:
                # The server answered 404 to our session id: it restarted and never saw the
                # request, so sending it once more on a new session is safe.
                if attempt == 2:
                    break
        raise EngineConnectionError(
            f"{self.label} at {self.url} does not accept this client's sessions (it "
            "answers HTTP 404 to every new session id)",
            url=self.url,
        )
