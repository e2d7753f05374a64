"""Webhook delivery: which hosts may receive a webhook, and the real HTTP POST.

Only loopback hosts and hosts explicitly allowed by the operator receive webhooks; any other
URL is refused before anything is sent.

>>> check_webhook_url("http://127.0.0.1:9/hook", allowed_hosts=())
'http://127.0.0.1:9/hook'
>>> check_webhook_url("https://hooks.example.test/x", allowed_hosts=())  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
algenta_graph.engine.errors.EngineToolError: webhook host 'hooks.example.test' is not allowed: ...
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx

from algenta_graph.engine.errors import EngineToolError

MAX_URL_LENGTH = 2048


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_webhook_url(url: str, *, allowed_hosts: Collection[str]) -> str:
    """Return ``url`` if it may receive a webhook; raise :class:`EngineToolError` otherwise."""
    if len(url) > MAX_URL_LENGTH:
        raise EngineToolError(
            "invalid_webhook_url", f"webhook_url is longer than {MAX_URL_LENGTH} characters"
        )
    bad = next((c for c in url if ord(c) < 0x21 or 0x7F <= ord(c) <= 0x9F), None)
    if bad is not None:
        raise EngineToolError(
            "invalid_webhook_url",
            f"webhook_url contains a control or whitespace character ({bad!r} at position"
            f" {url.index(bad)}); percent-encode it",
        )
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (ValueError when out of range)
        httpx.URL(url)
    except (ValueError, httpx.InvalidURL) as exc:
        raise EngineToolError(
            "invalid_webhook_url", f"webhook_url is not a valid URL ({exc}): {url!r}"
        ) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise EngineToolError(
            "invalid_webhook_url", f"webhook_url must be an http(s) URL with a host, got {url!r}"
        )
    host = parts.hostname.lower()
    if not _is_loopback(host) and host not in {h.lower() for h in allowed_hosts}:
        raise EngineToolError(
            "webhook_host_not_allowed",
            f"webhook host {host!r} is not allowed: only loopback hosts and hosts the operator"
            " allowed with --allow-webhook-host receive webhooks; nothing was sent",
            status_code=403,
        )
    return url


DeliveryOutcome = Literal["delivered", "failed", "unknown", "recorded"]

FAILURE_CODES: dict[str, str] = {
    "upstream_timeout": "the webhook did not answer the connection in time; nothing was sent",
    "upstream_unreachable": "the webhook could not be reached (refused, unreachable, TLS);"
    " nothing was sent",
    "upstream_rejected": "the webhook answered with a non-2xx status",
    "upstream_outcome_unknown": "the request was sent but no answer came (timeout, connection"
    " dropped): it counts as executed",
}
"""Each receipt's ``failure_code`` (None when delivered): what went wrong with the upstream."""


@dataclass(frozen=True)
class DeliveryResult:
    """What happened to one POST.

    - ``delivered``: the webhook answered 2xx;
    - ``failed``: nothing reached the webhook (connection refused, unreachable, TLS failure,
      no connection within the timeout: the request was never sent), or it answered with a
      non-2xx status;
    - ``unknown``: the request was sent (or partly sent) but no answer came back (timeout,
      connection dropped): the webhook may have acted on it, so it counts as executed;
    - ``recorded``: there was no webhook to send to (a plan executed over HTTP without one):
      the execution is on record and counts as executed.

    ``failure_code`` names the problem (:data:`FAILURE_CODES`), None when there was none.
    """

    outcome: DeliveryOutcome
    response_code: int | None
    failure_reason: str | None = None
    failure_code: str | None = None

    @property
    def delivered(self) -> bool:
        """Whether the webhook answered 2xx."""
        return self.outcome == "delivered"


async def post_webhook(
    client: httpx.AsyncClient, url: str, body: dict[str, Any], *, timeout: float
) -> DeliveryResult:
    """POST ``body`` as JSON within ``timeout`` seconds (connect, write and read together).

    Whether the request had started to go out when something failed is read from httpcore's
    ``trace`` extension (``*.send_request_headers.started``), not guessed from the exception.
    """
    sending = False

    async def trace(event: str, info: dict[str, Any]) -> None:
        nonlocal sending
        if event.endswith("send_request_headers.started"):
            sending = True

    def unsent_or_unknown(what: str, unsent_code: str) -> DeliveryResult:
        if sending:
            return DeliveryResult(
                "unknown",
                None,
                f"{what} after the request was sent: the webhook may have acted on it, so it"
                " counts as executed (only an operator can send it again, with force=true)",
                "upstream_outcome_unknown",
            )
        return DeliveryResult("failed", None, f"{what} before the request was sent", unsent_code)

    try:
        response = await asyncio.wait_for(
            client.post(url, json=body, timeout=timeout, extensions={"trace": trace}), timeout
        )
    except (httpx.TimeoutException, asyncio.TimeoutError):
        return unsent_or_unknown(f"timeout: no answer within {timeout:g}s", "upstream_timeout")
    except httpx.ConnectError as exc:
        return DeliveryResult(
            "failed",
            None,
            f"connection refused or unreachable: {exc}; nothing was sent",
            "upstream_unreachable",
        )
    except httpx.HTTPError as exc:
        return unsent_or_unknown(f"{type(exc).__name__}: {exc}", "upstream_unreachable")
    code = response.status_code
    if 200 <= code < 300:
        return DeliveryResult("delivered", code)
    return DeliveryResult("failed", code, f"webhook answered HTTP {code}", "upstream_rejected")
