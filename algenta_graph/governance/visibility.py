"""Which gates a served thread waits on, kept in its thread metadata for the auth filters.

LangGraph's custom auth filters threads by their **metadata** only (``$eq``, ``$contains``,
``$or``), and whether a thread waits for an operator is not in it. A node cannot write its
thread's metadata through the state. The ecosystem's way for code running inside a LangGraph
server to use the server's own API is ``langgraph_sdk.get_client()`` without a URL: an
in-process client over ASGI, which skips authentication but still passes the custom auth
handlers **as the user of the run** (the server carries the run's auth context into it). So a
denial handler, when served, patches two keys of its thread's metadata with that client:

- :data:`WAITING_KEY`: the gates the thread waits on (set when an escalation is raised, emptied
  when it is answered or expires);
- :data:`DECIDED_KEY`: the operators who answered one of its escalations (whose answer took
  effect).

And the server, when an operator's answer to a thread waiting on a gate that operator may answer
is accepted (:mod:`algenta_graph.serving.answer_check`), records them under
:func:`answered_key` (one key per operator, so two answers at once never overwrite each other):
an answer that loses, in a race or queued behind the winner, is refused inside its run, and its
operator must still read that run's error after the winner's run has cleared
:data:`WAITING_KEY`. Nobody else gains anything: an operator of another gate, an agent, an
operator who never answered.

The patch carries :data:`GRAPH_WRITE_KEY` with this process's secret (:func:`graph_write`), which
:mod:`algenta_graph.serving.auth` checks and removes: only the graph itself, in the server's
process, may set these keys (on any thread, whoever the run's user is); a client that sends them
is refused. The auth filters read them: ``operator:<gate>`` reads the threads waiting on that
gate plus those it decided or answered, ``operator`` every waiting thread plus those it decided
or answered. Outside a LangGraph server (the library, the CLI) there is no thread metadata, and
:func:`server_metadata_writer` is ``None``.

A failed write is logged, never raised: a thread whose ``waiting`` was not set stays hidden from
operators (fail closed), and one whose ``waiting`` was not cleared stays visible to those who
could already read it.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

__all__ = [
    "ANSWERED_PREFIX",
    "DECIDED_KEY",
    "GRAPH_METADATA_KEYS",
    "GRAPH_WRITE_KEY",
    "WAITING_KEY",
    "MetadataWriter",
    "answered_key",
    "graph_write",
    "is_graph_metadata",
    "is_graph_write",
    "record_answered",
    "server_metadata_writer",
    "set_waiting",
]

logger = logging.getLogger(__name__)

WAITING_KEY = "algenta_waiting"
"""Thread metadata: the gates the thread waits on (a list; empty when none)."""
DECIDED_KEY = "algenta_decided_by"
"""Thread metadata: the identities that answered one of the thread's escalations (a list)."""
ANSWERED_PREFIX = "algenta_answered_by:"
"""Thread metadata keys ``algenta_answered_by:<identity>``: that operator answered one of the
thread's escalations while it waited on a gate they may answer (:func:`answered_key`)."""
GRAPH_METADATA_KEYS: tuple[str, ...] = (WAITING_KEY, DECIDED_KEY)
"""The thread metadata only the graph writes: a client may not set them (nor any key starting
with :data:`ANSWERED_PREFIX`: :func:`is_graph_metadata`)."""


def answered_key(identity: str) -> str:
    """The metadata key saying ``identity`` answered one of the thread's escalations.

    >>> answered_key("ana")
    'algenta_answered_by:ana'
    """
    return ANSWERED_PREFIX + identity


def is_graph_metadata(key: str) -> bool:
    """Whether ``key`` is thread metadata only the graph (or the server) may set.

    >>> is_graph_metadata("algenta_waiting"), is_graph_metadata("algenta_answered_by:x")
    (True, True)
    >>> is_graph_metadata("topic")
    False
    """
    return key in GRAPH_METADATA_KEYS or key.startswith(ANSWERED_PREFIX)


GRAPH_WRITE_KEY = "algenta_graph_write"
"""The key of a metadata patch that proves it comes from the graph in this process (removed
before it is stored)."""

MetadataWriter = Callable[[str, dict[str, Any]], Awaitable[None]]
"""``(thread_id, {key: value}) -> None``: merge keys into a thread's metadata."""

_SECRET = secrets.token_hex(32)


def graph_write() -> str:
    """This process's secret, which a metadata patch of the graph's own keys carries."""
    return _SECRET


def is_graph_write(token: Any) -> bool:
    """Whether ``token`` is this process's secret (constant time)."""
    return isinstance(token, str) and hmac.compare_digest(token, _SECRET)


def server_metadata_writer() -> MetadataWriter | None:
    """The in-process writer of thread metadata, inside a LangGraph server.

    ``None`` outside one (the server's app is not loaded in this process).
    """
    if "langgraph_api.server" not in sys.modules:
        return None
    from langgraph_sdk import get_client

    async def write(thread_id: str, patch: dict[str, Any]) -> None:
        # no URL: the server itself, in process (its auth handlers see the run's user, and the
        # secret that says the patch is the graph's own)
        async with get_client(api_key=None) as client:
            await client.threads.update(
                thread_id, metadata={**patch, GRAPH_WRITE_KEY: graph_write()}
            )

    return write


async def set_waiting(
    thread_id: str | None,
    gates: Sequence[str],
    *,
    decided_by: Sequence[str] = (),
    write: MetadataWriter | None = None,
) -> None:
    """Record in the thread's metadata that it waits on ``gates`` (and, given, who decided).

    ``decided_by``: every operator who answered one of the thread's escalations (the state's
    records say who). ``write`` defaults to :func:`server_metadata_writer`; nothing is done
    without one or without a thread. Never raises (a failure is logged).
    """
    write = write if write is not None else server_metadata_writer()
    if write is None or not thread_id:
        return
    patch: dict[str, Any] = {WAITING_KEY: list(dict.fromkeys(gates))}
    if decided_by:
        patch[DECIDED_KEY] = sorted(set(decided_by))
    try:
        await write(thread_id, patch)
    except Exception as exc:  # visibility is kept best-effort; the escalation itself goes on
        logger.warning("thread %s: could not record waiting gates %s: %s", thread_id, gates, exc)


async def record_answered(
    thread_id: str, identity: str, *, write: MetadataWriter | None = None
) -> None:
    """Record in the thread's metadata that ``identity`` answered one of its escalations.

    Only for an operator whose answer the server accepted while the thread waited on a gate
    they may answer (the caller checks). ``write`` defaults to :func:`server_metadata_writer`.

    Raises:
        Exception: the write failed (the caller refuses the answer: an operator who could not
            read their run's end would not be told if it lost).
    """
    write = write if write is not None else server_metadata_writer()
    if write is not None:
        await write(thread_id, {answered_key(identity): identity})
