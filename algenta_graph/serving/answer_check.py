"""An operator's answer on the served graph, checked before its run: refused by name, or let in.

An answer is a run whose ``command`` is a ``resume`` (:mod:`algenta_graph.serving.auth` lets only
operators send one). The compiled graph refuses an answer that answers nothing
(:mod:`algenta_graph.graph.resumes`), but served, that refusal is the run's error, and a caller
reads a run only through the thread's read filter: an operator reads a thread while it waits on
a gate they may answer and once their answer decided it, so the operator whose answer lost was
refused where they could not read it (a ``200`` with an empty body, or ``404 Run not found`` once
the winner's run cleared what the thread waits on). So the server, on the run's creation
(:func:`check_answer`), reads the thread's state through its own in-process client
(``langgraph_sdk.get_client()`` without a URL) and:

- **nothing waits** on the thread: the answer is refused with HTTP 409 before any run, its
  detail the refusal the graph would raise (``EscalationAlreadyDecided: escalation already
  decided by ana (override in thread ... at ...)``, or ``NoEscalationPending``), but only to an
  operator who may answer a gate of the thread's decisions (anyone else learns nothing of who
  decided: see the last case);
- **an escalation waits** on a gate the operator may answer: the operator is recorded in the
  thread's metadata (:func:`~algenta_graph.governance.visibility.record_answered`), so their run's
  end stays readable to them whatever it is: their answer taking effect, or
  ``EscalationAlreadyDecided`` when another answer wins the race inside the graph;
- **an escalation waits** (or was decided) on gates the operator may not answer: let through
  unrecorded, as before this check: the graph refuses it naming the gate (its run's error, which
  the thread's owner and the auditors read; the operator gains no read of the thread).

The state read is the server's own (:func:`graph_reads` is true around it, and the read handler
lets it read any thread): nothing a client sends can set it. A thread the server does not know
is left to the server (its own 404). When the state cannot be read or the operator cannot be
recorded, the answer is refused (503), never let in unchecked.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Mapping
from typing import Any

import httpx
from langgraph_sdk import Auth

from algenta_graph.governance.visibility import record_answered
from algenta_graph.graph.resumes import refusal
from algenta_graph.serving.roles import is_operator

__all__ = ["check_answer", "graph_reads", "waiting_gates"]

logger = logging.getLogger(__name__)

_GRAPH_READ: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "algenta_graph_read", default=False
)


def graph_reads() -> bool:
    """Whether the request being authorized is the server's own read (:func:`check_answer`)."""
    return _GRAPH_READ.get()


def waiting_gates(state: Mapping[str, Any]) -> set[str]:
    """The gates a thread's state (the API's ``/threads/{id}/state``) waits on.

    >>> sorted(waiting_gates({"tasks": [{"interrupts": [{"value": {"gate": "confidence"}}]}]}))
    ['confidence']
    """
    return {
        str(i["value"]["gate"])
        for task in state.get("tasks") or []
        for i in task.get("interrupts") or []
        if isinstance(i.get("value"), Mapping) and i["value"].get("gate")
    }


def _unavailable(detail: str) -> Auth.exceptions.HTTPException:
    return Auth.exceptions.HTTPException(status_code=503, detail=detail)


async def _thread_state(thread_id: str) -> dict[str, Any] | None:
    """The thread's state read by the server itself (``None``: no such thread here)."""
    from langgraph_sdk import get_client

    reading = _GRAPH_READ.set(True)
    try:
        async with get_client(api_key=None) as client:
            return dict(await client.threads.get_state(thread_id))
    except httpx.HTTPStatusError as exc:
        if exc.response.status_code == 404:
            return None
        raise
    finally:
        _GRAPH_READ.reset(reading)


async def check_answer(thread_id: str, identity: str, roles: frozenset[str]) -> None:
    """Let ``identity``'s answer on ``thread_id`` in, recorded, or refuse it (module docs).

    Raises:
        Auth.exceptions.HTTPException: 409 (nothing waits: who decided, when), 503 (the check
            could not be made).
    """
    try:
        state = await _thread_state(thread_id)
    except Exception as exc:  # fail closed: an answer is never let in unchecked
        logger.warning("thread %s: could not read its state to check an answer: %s", thread_id, exc)
        raise _unavailable(
            f"the answer could not be checked (the thread's state could not be read: {exc}); "
            "nothing was sent: retry"
        ) from None
    if state is None or not (state.get("values") or state.get("tasks")):
        # not a thread of this server (its own 404), or one it only registered: `langgraph dev`
        # workers keep their own thread registries, and one that never ran the thread reads it
        # empty; the graph, reading the shared checkpoints, refuses it by name (the run's error)
        return
    waiting = waiting_gates(state)
    if waiting:
        if not any(is_operator(roles, gate) for gate in waiting):
            return  # not theirs: the graph refuses it by name, and nothing is recorded here
        try:
            await record_answered(thread_id, identity)
        except Exception as exc:  # fail closed: a loser who could not read its end is not told
            logger.warning("thread %s: could not record %s's answer: %s", thread_id, identity, exc)
            raise _unavailable(
                f"the answer could not be recorded as {identity}'s ({exc}); nothing was sent: retry"
            ) from None
        return
    values = state.get("values")
    decided = values.get("operator_decisions") if isinstance(values, Mapping) else None
    gates = {str(d.get("gate")) for d in decided or [] if isinstance(d, Mapping)}
    if gates and not any(is_operator(roles, gate) for gate in gates):
        return  # not theirs to answer: told nothing here of who decided (the graph refuses it)
    refused = refusal(values if isinstance(values, Mapping) else None, thread_id)
    raise Auth.exceptions.HTTPException(
        status_code=409, detail=f"{type(refused).__name__}: {refused}"
    )
