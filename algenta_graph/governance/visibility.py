"""Which gates a served thread waits on, kept in its thread metadata for the auth filters.

LangGraph's custom auth filters threads by their **metadata** only (``$eq``, ``$contains``,
``$or``), and whether a thread waits for an operator is not in it. A node cannot write its
thread's metadata through the state; the ecosystem's way for code running inside a LangGraph
server to use the server's own API is ``langgraph_sdk.get_client()`` without a URL: an
in-process client over ASGI, whose requests the server does not pass through custom auth (the
server's own calls). So a denial handler, when served, keeps two keys of its thread's metadata:

- :data:`WAITING_KEY`: the gates the thread waits on (set when an escalation is raised, emptied
  when it is answered or expires);
- :data:`DECIDED_KEY`: the operators who answered one of its escalations.

:mod:`algenta_graph.serving.auth` filters on them: ``operator:<gate>`` reads the threads waiting
on that gate plus those it decided, ``operator`` every waiting thread plus those it decided.
Outside a LangGraph server (the library, the CLI) there is no thread metadata, and
:func:`server_metadata_writer` is ``None``.

A failed write is logged, never raised: a thread whose ``waiting`` was not set stays hidden from
operators (fail closed), and one whose ``waiting`` was not cleared stays visible to those who
could already read it.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

__all__ = [
    "DECIDED_KEY",
    "GRAPH_METADATA_KEYS",
    "WAITING_KEY",
    "MetadataWriter",
    "server_metadata_writer",
    "set_waiting",
]

logger = logging.getLogger(__name__)

WAITING_KEY = "algenta_waiting"
"""Thread metadata: the gates the thread waits on (a list; empty when none)."""
DECIDED_KEY = "algenta_decided_by"
"""Thread metadata: the identities that answered one of the thread's escalations (a list)."""
GRAPH_METADATA_KEYS: tuple[str, ...] = (WAITING_KEY, DECIDED_KEY)
"""The thread metadata only the graph writes: a client may not set them."""

MetadataWriter = Callable[[str, dict[str, Any]], Awaitable[None]]
"""``(thread_id, {key: value}) -> None``: merge keys into a thread's metadata."""
MetadataReader = Callable[[str], Awaitable[dict[str, Any]]]


def server_metadata_writer() -> tuple[MetadataReader, MetadataWriter] | None:
    """The in-process reader and writer of thread metadata, inside a LangGraph server.

    ``None`` outside one (the server's app is not loaded in this process).
    """
    if "langgraph_api.server" not in sys.modules:
        return None
    from langgraph_sdk import get_client

    async def read(thread_id: str) -> dict[str, Any]:
        # no URL: the server itself, in process, past custom auth
        async with get_client() as client:
            thread = await client.threads.get(thread_id)
        return dict(thread.get("metadata") or {})

    async def write(thread_id: str, patch: dict[str, Any]) -> None:
        async with get_client() as client:
            await client.threads.update(thread_id, metadata=patch)

    return read, write


async def set_waiting(
    thread_id: str | None,
    gates: Sequence[str],
    *,
    decided_by: str | None = None,
    io: tuple[MetadataReader, MetadataWriter] | None = None,
) -> None:
    """Record in the thread's metadata that it waits on ``gates`` (and who decided, if given).

    ``io`` defaults to :func:`server_metadata_writer`; nothing is done without one or without a
    thread. Never raises (a failure is logged).
    """
    io = io if io is not None else server_metadata_writer()
    if io is None or not thread_id:
        return
    read, write = io
    try:
        patch: dict[str, Any] = {WAITING_KEY: list(dict.fromkeys(gates))}
        if decided_by:
            current = await read(thread_id)
            decided = [str(d) for d in current.get(DECIDED_KEY) or [] if isinstance(d, str)]
            if decided_by not in decided:
                decided.append(decided_by)
            patch[DECIDED_KEY] = decided
        await write(thread_id, patch)
    except Exception as exc:  # visibility is kept best-effort; the escalation itself goes on
        logger.warning("thread %s: could not record waiting gates %s: %s", thread_id, gates, exc)
