"""The ASGI middleware in front of the whole engine: bearer keys on ``/mcp``, bounded bodies.

It also routes ``/v1/...`` to the HTTP API, whose routes authenticate and answer themselves.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from algenta_graph.engine.auth import KeyRing, request_token

logger = logging.getLogger("algenta_graph.engine")

MAX_REQUEST_BYTES = 1024 * 1024
MAX_JSON_DEPTH = 100
MCP_PATH = "/mcp"
API_PREFIX = "/v1"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class EngineGuard:
    """ASGI middleware in front of the whole engine.

    - With API keys, every request to ``/mcp`` (``initialize`` and ``tools/list`` included, so
      a client with a missing or wrong token fails when it connects) needs
      ``Authorization: Bearer <token>`` of a known key (the scheme in any case): otherwise HTTP
      401 ``{"error": {"code": "unauthorized", ...}}``.
    - Every POST body is read once (over :data:`MAX_REQUEST_BYTES`: 413) and, when it is JSON,
      refused with 400 ``invalid_json`` if nested deeper than :data:`MAX_JSON_DEPTH` (a 200k
      ``[`` body would otherwise end in a RecursionError and a traceback).

    Args:
        app: the MCP app behind it.
        keys: the engine's API keys (None: ``/mcp`` is open).
        api: the HTTP API's app, which serves ``/v1/...`` (None: no HTTP API).
    """

    def __init__(self, app: ASGIApp, keys: KeyRing | None, api: ASGIApp | None = None) -> None:
        self.app = app
        self._keys = keys
        self._api = api

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one ASGI connection: refuse it (401, 413, 400) or pass it on."""
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
    """The ``receive`` to hand the app behind a middleware that has read the whole request body.

    It answers that ``body`` once, as one message, then the client's own ``receive`` (its
    disconnect).
    """
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _error_body(code: str, message: str) -> dict[str, Any]:
    """``{"error": {"code", "message"}}``."""
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
    """Answer ``payload`` as JSON with ``status`` (the connection's whole response)."""
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
