"""The security headers of every inbox response.

A strict Content-Security-Policy (everything from the inbox itself, no inline script, no
framing), no MIME sniffing, no caching and no referrer: an ASGI middleware around the inbox's
routes. It changes no body and decides nothing about who may see a page
(:mod:`algenta_graph.inbox.signin`).
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CSP", "SecurityHeaders"]

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
"""The inbox's Content-Security-Policy."""


class SecurityHeaders:
    """Every inbox response: a strict CSP, no sniffing, no framing, no caching, no referrer.

    Args:
        app: the inbox's ASGI app.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Add the headers to an HTTP response."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def wrapped(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers") or [])
                for key, value in (
                    (b"content-security-policy", CSP.encode()),
                    (b"x-content-type-options", b"nosniff"),
                    (b"x-frame-options", b"DENY"),
                    (b"referrer-policy", b"no-referrer"),
                    (b"cache-control", b"no-store"),
                ):
                    headers.append((key, value))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, wrapped)
