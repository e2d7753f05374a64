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
from typing import Any
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
    parts = urlsplit(url)
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


@dataclass(frozen=True)
class DeliveryResult:
    """What happened to one POST: ``delivered`` for a 2xx answer, otherwise ``failed``."""

    delivered: bool
    response_code: int | None
    failure_reason: str | None = None


async def post_webhook(
    client: httpx.AsyncClient, url: str, body: dict[str, Any], *, timeout: float
) -> DeliveryResult:
    """POST ``body`` as JSON within ``timeout`` seconds (connect, write and read together)."""
    try:
        response = await asyncio.wait_for(client.post(url, json=body, timeout=timeout), timeout)
    except (httpx.TimeoutException, asyncio.TimeoutError):
        return DeliveryResult(False, None, f"timeout: no answer within {timeout:g}s")
    except httpx.ConnectError as exc:
        return DeliveryResult(False, None, f"connection refused or unreachable: {exc}")
    except httpx.HTTPError as exc:
        return DeliveryResult(False, None, f"{type(exc).__name__}: {exc}")
    code = response.status_code
    if 200 <= code < 300:
        return DeliveryResult(True, code)
    return DeliveryResult(False, code, f"webhook answered HTTP {code}")
