"""The HTTP client under an MCP session: the trace context on every request, a lost answer seen.

Every request carries the W3C trace context (:func:`trace_headers`: the engine call's span from
the JSON-RPC ``params._meta``, else the context current where the session opened); a connection
lost in the middle of a POST's answer is reported at once (mcp's client would swallow it and
leave the request waiting for its read timeout), so the session ends and the call fails now.
It neither opens a session nor names an error (:mod:`algenta_graph.connection.transport`,
:mod:`algenta_graph.connection.failures`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
from opentelemetry import propagate

__all__ = ["trace_headers", "watched_client"]

_TRACE_KEYS = ("traceparent", "tracestate", "baggage")


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
        response = await self._inner.handle_async_request(request)
        if request.method == "POST":  # the answers to our requests, not the GET event stream
            response.stream = _WatchedStream(response.stream, self._on_lost)
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
