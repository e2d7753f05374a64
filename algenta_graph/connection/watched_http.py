"""The HTTP client under an MCP session: the trace context on every request, a lost answer seen.

Every request carries the W3C trace context (:func:`trace_headers`: the engine call's span from
the JSON-RPC ``params._meta``, else the context current where the session opened). An answer
lost is reported at once, so the session ends and the call fails now, where mcp's client would
leave the request waiting for its read timeout:

- a connection lost in the middle of a POST's answer (reset, or closed mid-body: mcp's client
  swallows the error);
- a POST's answer stream (server-sent events) that ends cleanly without the answer to its
  request and without an event id to resume from (a FastMCP server stopped gracefully closes
  its open streams so; :class:`AnswerWatch`);
- a resumption of such a stream (a GET with ``Last-Event-ID``) that cannot connect.

It neither opens a session nor names an error (:mod:`algenta_graph.connection.transport`,
:mod:`algenta_graph.connection.failures`).
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
from opentelemetry import propagate

from algenta_graph.connection.failures import AnswerStreamEnded

__all__ = ["AnswerWatch", "trace_headers", "watched_client"]

_TRACE_KEYS = ("traceparent", "tracestate", "baggage")
_LINE_END = re.compile(r"\r\n|\r|\n")
_RESUME_HEADER = "last-event-id"


class AnswerWatch:
    r"""What a POST's server-sent-event answer carried: its request's answer, an event id.

    Fed the answer's bytes as they arrive; reads the events as the SSE format defines them
    (``data`` lines joined, ``id``, dispatched on a blank line) and keeps only whether one was
    the JSON-RPC answer to ``request_id`` and whether any carried an event id (mcp's client
    then resumes the stream itself, with ``Last-Event-ID``).

    >>> watch = AnswerWatch(7)
    >>> watch.feed(b'event: message\r\ndata: {"method":"notifications/progress"}\r\n\r')
    >>> watch.answered, watch.resumable
    (False, False)
    >>> watch.feed(b'\ndata: {"jsonrpc":"2.0","id":7,"result":{}}\r\n\r\n')
    >>> watch.answered
    True
    """

    def __init__(self, request_id: Any) -> None:
        self.request_id = request_id
        self.answered = False
        self.resumable = False
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._partial = ""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> None:
        """Read the next bytes of the answer."""
        text = self._partial + self._decoder.decode(chunk)
        held = "\r" if text.endswith("\r") else ""  # maybe the first half of a CRLF
        lines = _LINE_END.split(text[: len(text) - len(held)])
        self._partial = lines.pop() + held
        for line in lines:
            self._line(line)

    def _line(self, line: str) -> None:
        if not line:
            self._dispatch()
            return
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            self._data.append(value)
        elif name == "id" and value:
            self.resumable = True

    def _dispatch(self) -> None:
        data, self._data = self._data, []
        if not data or self.answered:
            return
        try:
            message = json.loads("\n".join(data))
        except ValueError:
            return
        self.answered = (
            isinstance(message, dict)
            and "method" not in message
            and message.get("id") == self.request_id
        )


def _request_id(request: httpx.Request) -> Any:
    """The JSON-RPC id of the request a POST sends (None for a notification or an answer)."""
    try:
        message = json.loads(request.content)
    except (httpx.RequestNotRead, ValueError):
        return None
    if isinstance(message, dict) and "method" in message:
        return message.get("id")
    return None


class _WatchedStream(httpx.AsyncByteStream):
    """A POST's answer body that reports an answer lost before the caller waits for it.

    A connection lost mid-answer is reported before it is re-raised (mcp's client swallows it
    on an SSE answer); an SSE answer (``watch``) read to its end without the answer to its
    request and without an event id to resume from is reported when it ends. Either way the
    session ends, so the call fails at once.
    """

    def __init__(
        self,
        inner: Any,
        on_lost: Callable[[BaseException], None],
        watch: AnswerWatch | None = None,
    ) -> None:
        self._inner = inner
        self._on_lost = on_lost
        self._watch = watch

    async def __aiter__(self) -> AsyncIterator[bytes]:
        watch = self._watch
        try:
            async for chunk in self._inner:
                if watch is not None:
                    watch.feed(chunk)
                yield chunk
        except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
            self._on_lost(exc)
            raise
        if watch is not None and not watch.answered and not watch.resumable:
            self._on_lost(
                AnswerStreamEnded(
                    "the server ended its answer without the result (it stopped, or dropped "
                    "the request)"
                )
            )

    async def aclose(self) -> None:
        await self._inner.aclose()


def trace_headers(request: httpx.Request) -> dict[str, str]:
    """The W3C trace context headers a request carries to the engine.

    Those of the JSON-RPC request's ``params._meta`` (``traceparent``, ``tracestate``,
    ``baggage``: the engine call's span, :class:`~algenta_graph.telemetry.engine_calls.EngineCall`);
    for a request without them (``initialize``, notifications, the GET event stream) the trace
    context current where the session was opened. Nothing without a configured tracer.

    >>> parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    >>> body = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x",'
    >>> body += b'"_meta":{"traceparent":"' + parent.encode() + b'"}}}'
    >>> trace_headers(httpx.Request("POST", "http://e/mcp", content=body))["traceparent"][:6]
    '00-4bf'
    """
    try:
        content = request.content if request.method == "POST" else b""
    except httpx.RequestNotRead:  # a streamed body: not one of mcp's JSON-RPC messages
        content = b""
    if b'"traceparent"' in content:
        try:
            message = json.loads(content)
        except ValueError:
            message = None
        params = message.get("params") if isinstance(message, dict) else None
        meta = params.get("_meta") if isinstance(params, dict) else None
        if isinstance(meta, dict) and isinstance(meta.get("traceparent"), str):
            return {k: meta[k] for k in _TRACE_KEYS if isinstance(meta.get(k), str)}
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return {k: v for k, v in carrier.items() if k in _TRACE_KEYS}


class _WatchedTransport(httpx.AsyncBaseTransport):
    def __init__(
        self, inner: httpx.AsyncBaseTransport, on_lost: Callable[[BaseException], None]
    ) -> None:
        self._inner = inner
        self._on_lost = on_lost

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        request.headers.update(trace_headers(request))  # W3C trace context, every request
        try:
            response = await self._inner.handle_async_request(request)
        except httpx.TransportError as exc:
            if request.method == "GET" and _RESUME_HEADER in request.headers:
                # resuming an answer stream that ended early: the server is gone
                self._on_lost(
                    AnswerStreamEnded(
                        "the server ended its answer without the result, and resuming it "
                        f"failed ({type(exc).__name__}: {exc})"
                    )
                )
            raise
        if request.method == "POST":  # the answers to our requests, not the GET event stream
            kind = response.headers.get("content-type", "")
            request_id = _request_id(request) if kind.startswith("text/event-stream") else None
            watch = AnswerWatch(request_id) if request_id is not None else None
            response.stream = _WatchedStream(response.stream, self._on_lost, watch)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def watched_client(
    on_lost: Callable[[BaseException], None],
    headers: dict[str, str] | None = None,
    timeout: httpx.Timeout | None = None,
    auth: httpx.Auth | None = None,
) -> httpx.AsyncClient:
    """An ``AsyncClient`` that sends the trace context and calls ``on_lost`` on a lost answer."""
    return httpx.AsyncClient(
        headers=headers,
        timeout=timeout,
        auth=auth,
        transport=_WatchedTransport(httpx.AsyncHTTPTransport(), on_lost),
    )
