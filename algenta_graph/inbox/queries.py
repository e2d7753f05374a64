"""The graph's own API as the signed-in operator: the client, its errors, the threads and state.

Every call goes to the LangGraph server's API with the operator's own token (``Authorization:
Bearer``), so the server's custom auth (:mod:`algenta_graph.serving.auth`) decides what the
operator sees and may do, exactly as for any other client: the inbox never reads a checkpoint
store itself and never writes a record; an answer is a resume of the thread, as Agent Inbox or
``langgraph_sdk`` sends it. Inside a LangGraph server the calls go to the server's app in
process (:class:`httpx.ASGITransport`, **through** its auth middleware: not the SDK's
``get_client()`` loopback, which skips authentication); ``ALGENTA_INBOX_API_URL`` points the
inbox at a server elsewhere.

What the pages make of it lives next to this: the queue (:mod:`.waiting`), one escalation
(:mod:`.escalation`), the answer sent (:mod:`.resume`), the timeline and the decided
(:mod:`.audit_trail`); the engine's own view of a decision is :mod:`.engine_reads`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

import httpx
from langgraph_sdk.client import LangGraphClient

from algenta_graph.errors import InboxAPIError

__all__ = [
    "DEFAULT_ASSISTANT",
    "ENV_API_URL",
    "MAX_THREADS",
    "PAGE",
    "InboxAPIError",
    "api_client",
    "api_error",
    "get_thread",
    "readable_threads",
    "thread_state",
]

ENV_API_URL = "ALGENTA_INBOX_API_URL"
"""The LangGraph API the inbox calls (default: the server it is served by, in process)."""
DEFAULT_ASSISTANT = "governed_agent"
PAGE = 100
"""How many threads or checkpoints one API call asks for."""
MAX_THREADS = 2000
"""How many threads the inbox reads at most."""


def api_client(token: str) -> LangGraphClient:
    """A LangGraph client that calls the API as the bearer of ``token`` (``""``: no token).

    Raises:
        InboxAPIError: no API to call (outside a LangGraph server, without
            ``ALGENTA_INBOX_API_URL``).
    """
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    url = os.environ.get(ENV_API_URL, "").strip()
    timeout = httpx.Timeout(connect=5, read=300, write=300, pool=5)
    if url:
        http = httpx.AsyncClient(base_url=url, headers=headers, timeout=timeout)
    else:
        server = sys.modules.get("langgraph_api.server")
        app = getattr(server, "app", None)
        if app is None:
            raise InboxAPIError(
                503,
                f"the inbox is not inside a LangGraph server: set {ENV_API_URL} to the API's URL",
            )
        # the server's own app, through its middleware (the custom auth applies to this token)
        transport = httpx.ASGITransport(app=app)
        http = httpx.AsyncClient(
            base_url="http://inbox.local", transport=transport, headers=headers, timeout=timeout
        )
    return LangGraphClient(http)


def api_error(exc: Exception) -> InboxAPIError:
    """The :class:`InboxAPIError` of a failed call: the server's status and detail, else 502."""
    if isinstance(exc, httpx.HTTPStatusError):
        try:
            detail = exc.response.json().get("detail") or exc.response.text
        except ValueError:
            detail = exc.response.text
        return InboxAPIError(exc.response.status_code, str(detail))
    return InboxAPIError(502, f"the API could not be reached: {exc}")


async def readable_threads(
    client: LangGraphClient, select: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """Every thread the caller may read (the first 2,000), most recently updated first.

    Args:
        client: the API, as the caller.
        select: only these fields of each thread (``None``: all, its values included).
    """
    out: list[dict[str, Any]] = []
    fields: Any = list(select) if select is not None else None
    try:
        while len(out) < MAX_THREADS:
            page = await client.threads.search(
                limit=PAGE,
                offset=len(out),
                sort_by="updated_at",
                sort_order="desc",
                select=fields,
            )
            out += [dict(t) for t in page]
            if len(page) < PAGE:
                break
    except httpx.HTTPError as exc:
        raise api_error(exc) from None
    return out


async def thread_state(client: LangGraphClient, thread_id: str) -> dict[str, Any]:
    """The thread's current state (its values, its tasks' pending interrupts), as the caller."""
    try:
        return dict(await client.threads.get_state(thread_id))
    except httpx.HTTPError as exc:
        raise api_error(exc) from None


async def get_thread(client: LangGraphClient, thread_id: str) -> dict[str, Any]:
    """The thread itself (its metadata: owner, assistant), as the caller."""
    try:
        return dict(await client.threads.get(thread_id))
    except httpx.HTTPError as exc:
        raise api_error(exc) from None
