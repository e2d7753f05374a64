"""The one translation of MCP transport failures into typed errors naming the URL.

What mcp 1.x's streamable-HTTP client raises (exception groups from its task group, ``McpError``
codes, ``httpx`` errors, validation errors of a body that is not JSON-RPC) is searched leaf by
leaf and turned into :class:`~algenta_graph.errors.EngineAuthError` (HTTP 401),
:class:`~algenta_graph.errors.EngineTimeoutError`,
:class:`~algenta_graph.errors.ToolCallLostError` (a tool call's connection closed or reset
after it was sent) or :class:`~algenta_graph.errors.EngineConnectionError`, each naming the
server, its URL, what was being done and what to check, with the connection's secrets
redacted. A call that may have run (lost, or timed out) is never described as safe to send
again, and its message never suggests raising a timeout and retrying. It holds no session
(:mod:`algenta_graph.connection.transport`).
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable, Iterator

import httpx
from mcp.shared.exceptions import McpError
from mcp.types import CONNECTION_CLOSED
from pydantic import ValidationError

from algenta_graph.errors import (
    EngineAuthError,
    EngineConnectionError,
    EngineTimeoutError,
    ToolCallLostError,
)

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup

__all__ = [
    "is_closed",
    "is_forgotten",
    "is_late_answer",
    "is_timeout",
    "leaves",
    "lost_call",
    "timeout_error",
    "translate",
]


def leaves(exc: BaseException) -> Iterator[BaseException]:
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


def is_timeout(exc: BaseException) -> bool:
    """An HTTP or asyncio timeout, or mcp's request timeout (JSON-RPC 408)."""
    return isinstance(exc, httpx.TimeoutException | TimeoutError) or (
        isinstance(exc, McpError) and exc.error.code == httpx.codes.REQUEST_TIMEOUT
    )


def is_closed(exc: BaseException) -> bool:
    """Mcp's report that the connection closed under a request."""
    return isinstance(exc, McpError) and exc.error.code == CONNECTION_CLOSED


def is_forgotten(exc: BaseException) -> bool:
    """The server answered HTTP 404 to the session id: it restarted and never ran the request."""
    return isinstance(exc, McpError) and exc.error.message == "Session terminated"


def is_late_answer(exc: BaseException) -> bool:
    """The mcp client's report of an answer to a request it no longer waits for (timed out)."""
    return isinstance(exc, RuntimeError) and "unknown request ID" in str(exc)


class SessionForgotten(Exception):
    """The server forgot the session (it restarted): the request never ran, send it again.

    The transport's own signal to itself (raised and caught in
    :mod:`algenta_graph.connection.transport`); it never reaches a caller, so it is not one of
    :mod:`algenta_graph.errors`.
    """


class AnswerStreamEnded(Exception):
    """The server ended its answer to a request without the answer in it.

    A FastMCP server stopped gracefully (SIGTERM) closes each open answer stream cleanly; mcp's
    client then waits for the answer until its read timeout. The HTTP client under a session
    (:mod:`algenta_graph.connection.watched_http`) reports it instead, and it is translated
    here (a tool call: :class:`~algenta_graph.errors.ToolCallLostError`). Like
    :class:`SessionForgotten`, it never reaches a caller as itself.
    """


MAY_HAVE_RUN = "the call may have run: do not call it again before checking what it did"
"""What every error of a call that was sent and not answered says (lost, or timed out)."""


def timeout_error(
    label: str, url: str, what: str, seconds: float, option: str, *, call: bool = False
) -> EngineTimeoutError:
    """The error of no answer within ``seconds`` while ``what``.

    Connecting, it names ``option=`` to raise. A tool call (``call``) was sent and may have run,
    or may still be running: its message says so, and invites no retry.
    """
    if call:
        return EngineTimeoutError(
            f"timed out: {label} at {url} did not answer within {seconds:g} s while {what}; "
            f"{MAY_HAVE_RUN} (it may still be running; {option}= is how long a call may take).",
            url=url,
        )
    return EngineTimeoutError(
        f"timed out: {label} at {url} did not answer within {seconds:g} s while "
        f"{what} (raise {option}= if it is just slow).",
        url=url,
    )


def lost_call(label: str, url: str, what: str, tool: str, detail: str) -> ToolCallLostError:
    """The error of a call whose connection closed or reset after it was sent."""
    return ToolCallLostError(
        f"lost the connection to {label} at {url} while {what} ({detail}); {MAY_HAVE_RUN} "
        "(the server's own records). The next call reconnects.",
        url=url,
        tool=tool,
    )


def translate(
    exc: BaseException,
    what: str,
    *,
    label: str,
    url: str,
    open_timeout: float,
    redact: Callable[[str], str],
    tool: str | None = None,
) -> EngineConnectionError:
    """One typed error naming the URL for whatever the MCP client raised.

    Args:
        exc: what the client raised (a group, a chain: its leaves are searched).
        what: what was being done (``"connecting"``, ``"calling tool 'x'"``).
        label: how the server is named (``the Algenta engine``, ``MCP server 'crm'``).
        url: the server's URL.
        open_timeout: the connect timeout (named by a timeout while connecting).
        redact: removes the connection's secrets from a message.
        tool: the tool whose call was in flight (sent), if any: a connection that closed,
            reset or failed in a way this function does not know is then a
            :class:`~algenta_graph.errors.ToolCallLostError` (the call may have run); one that
            was never made (refused, unreachable) or an HTTP error status is not.
    """
    checks = (
        f"Check: (1) the URL {url} (base_url= or ALGENTA_BASE_URL); (2) that the engine "
        "is running there (e.g. `algenta-graph engine --port 8000`); (3) the API token "
        "(api_key= or ALGENTA_API_KEY)."
    )
    found = list(leaves(exc))
    for leaf in found:
        if isinstance(leaf, EngineConnectionError):
            return leaf
    for leaf in found:
        if isinstance(leaf, httpx.HTTPStatusError):
            status = leaf.response.status_code
            if status == 401:
                return EngineAuthError(
                    f"{label} at {url} rejected the API token (HTTP 401) while "
                    f"{what}: pass a valid token with api_key= or ALGENTA_API_KEY.",
                    url=url,
                )
            reason = leaf.response.reason_phrase or ""
            return EngineConnectionError(
                f"{label} at {url} answered HTTP {status} {reason} while {what}; "
                f"is that an MCP endpoint? {checks}",
                url=url,
            )
    for leaf in found:
        if is_timeout(leaf):
            sent = tool is not None and not isinstance(leaf, httpx.ConnectTimeout)
            return timeout_error(label, url, what, open_timeout, "timeout", call=sent)
    for leaf in found:
        if isinstance(leaf, _LOST):
            detail = _detail(leaf, redact)
            if tool is not None:
                return lost_call(label, url, what, tool, detail)
            return EngineConnectionError(
                f"lost the connection to {label} at {url} while {what} ({detail}). The next "
                "call reconnects.",
                url=url,
            )
    for leaf in found:
        if isinstance(leaf, httpx.TransportError | OSError):
            if tool is not None and not isinstance(leaf, _NOT_SENT):
                return lost_call(label, url, what, tool, _detail(leaf, redact))
            detail = redact(str(leaf)) or type(leaf).__name__
            return EngineConnectionError(
                f"cannot reach {label} at {url} while {what} ({detail}). {checks}",
                url=url,
            )
    for leaf in found:
        if isinstance(leaf, ValidationError):
            return EngineConnectionError(
                f"{label} at {url} sent an answer that is not an MCP JSON-RPC "
                f"message while {what}; is that an MCP endpoint? {checks}",
                url=url,
            )
    first = found[0] if found else exc
    if tool is not None:  # sent, and failed in a way not known here: it may have run
        return lost_call(label, url, what, tool, _detail(first, redact))
    detail = " ".join(redact(str(first)).split())[:300] or type(first).__name__
    return EngineConnectionError(
        f"the connection to {label} at {url} failed while {what} "
        f"({type(first).__name__}: {detail}). {checks}",
        url=url,
    )


_LOST = (httpx.RemoteProtocolError, httpx.ReadError, AnswerStreamEnded)
"""A connection closed or reset in the middle of an answer (after the request was sent)."""
_NOT_SENT = (
    httpx.ConnectError,
    httpx.UnsupportedProtocol,
    httpx.ProxyError,
    ConnectionRefusedError,
    socket.gaierror,
)
"""Transport failures that leave a request unsent: nothing reached the server."""


def _detail(leaf: BaseException, redact: Callable[[str], str]) -> str:
    text = " ".join(redact(str(leaf)).split())[:300]
    return text or type(leaf).__name__
