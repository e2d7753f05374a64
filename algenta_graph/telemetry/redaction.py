"""What a trace may hold of an error: its type, and its message without credentials.

An error's message can name a URL with a credential in it (``https://user:secret@host/...``, a
token in a query string: an extra MCP server's or a webhook's) or carry an ``Authorization``
value. :func:`without_credentials` removes them; :func:`record_error` is how every span of the
package records an error (``error.type``, the status, an ``exception`` event), through it.
Argument values and results are recorded only with opt-in content capture
(:class:`~algenta_graph.telemetry.instruments.Telemetry`).
"""

from __future__ import annotations

import re
import traceback

from opentelemetry.trace import Span, Status, StatusCode

from algenta_graph.telemetry import names

__all__ = ["record_error", "without_credentials"]

_URL = re.compile(
    r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)"
    r"(?P<userinfo>[^\s/?#@'\"<>]*@)?"
    r"(?P<rest>[^\s?#'\"<>]*)"
    r"(?P<query>\?[^\s#'\"<>]*)?"
    r"(?P<fragment>#[^\s'\"<>]*)?"
)
_AUTHORIZATION = re.compile(r"(?i)\b(bearer|basic|token)(\s+|=)[A-Za-z0-9._~+/=-]{4,}")
REDACTED = "[redacted]"


def _url(found: re.Match[str]) -> str:
    userinfo = f"{REDACTED}@" if found["userinfo"] else ""
    query = f"?{REDACTED}" if found["query"] else ""
    fragment = f"#{REDACTED}" if found["fragment"] else ""
    return f"{found['scheme']}{userinfo}{found['rest']}{query}{fragment}"


def without_credentials(text: str) -> str:
    """``text`` with each URL's user info, query and fragment, and each credential, redacted.

    >>> without_credentials("at https://ana:pw@hooks.example/x?token=abc#f (HTTP 500)")
    'at https://[redacted]@hooks.example/x?[redacted]#[redacted] (HTTP 500)'
    >>> without_credentials("sent Authorization: Bearer sk-live-1234 to http://127.0.0.1:8000/mcp")
    'sent Authorization: Bearer [redacted] to http://127.0.0.1:8000/mcp'
    """
    text = _URL.sub(_url, text)
    return _AUTHORIZATION.sub(lambda m: f"{m[1]}{m[2]}{REDACTED}", text)


def record_error(span: Span, error: BaseException) -> None:
    """Record ``error`` on ``span``: ``error.type``, an error status, an ``exception`` event.

    Every text without credentials (:func:`without_credentials`).
    """
    kind = type(error).__name__
    message = without_credentials(str(error))[:500]
    span.set_attribute(names.ERROR_TYPE, kind)
    if isinstance(error, Exception):
        stack = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        span.add_event(
            "exception",
            {
                "exception.type": type(error).__qualname__,
                "exception.message": message,
                "exception.stacktrace": without_credentials(stack),
            },
        )
    span.set_status(Status(StatusCode.ERROR, message))
