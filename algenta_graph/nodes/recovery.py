"""This thread's executions read back from the engine: found, settled, recovered.

The engine records every execution of a decision with the graph's ``metadata.algenta_graph``
tag (thread, tool call; an escalation's identity on the operator path). :func:`find_execution`
finds the one a tag test matches through the engine's ``get_decision`` (an internal, read-only
call) and, while it is still ``unknown`` (in flight), looks again until it ends
(:func:`settle_for`: its timeout plus a margin), so the record says how it ended
(``docs/ARCHITECTURE.md``, invariant 5); :func:`recover_execution` is the crash recovery of this
thread's own delivery. :func:`counts_as_executed` is invariant 8's rule: a delivery that may
have reached its target counts as executed. Not the sending (:mod:`algenta_graph.nodes.executor`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from algenta_graph.connection.client import EngineClient
from algenta_graph.connection.outcomes import ExecutionReceipt, parse_execution_outcome
from algenta_graph.errors import AlgentaGraphError
from algenta_graph.nodes.arguments import MAX_TIMEOUT_SECONDS

__all__ = ["counts_as_executed", "find_execution", "recover_execution", "settle_for"]

_SETTLE_POLL = 0.25


_SETTLE_MARGIN = 5.0


_ENGINE_DEFAULT_TIMEOUT = 10.0


def counts_as_executed(receipt: Mapping[str, Any]) -> bool:
    """Whether a receipt's delivery may have reached its target (invariant 8).

    Every receipt counts, unless the engine states that nothing was sent (``failed`` with
    ``retryable: true``).

    >>> counts_as_executed({"execution_status": "unknown"})
    True
    >>> counts_as_executed({"execution_status": "failed", "response_code": None})
    True
    >>> counts_as_executed({"execution_status": "failed", "retryable": True})
    False
    """
    return not (receipt.get("execution_status") == "failed" and receipt.get("retryable") is True)


def settle_for(args: Mapping[str, Any]) -> float:
    """How long an in-flight delivery of these arguments may still take to end.

    >>> settle_for({"timeout_seconds": 2}), settle_for({})
    (7.0, 15.0)
    """
    timeout = args.get("timeout_seconds")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        timeout = _ENGINE_DEFAULT_TIMEOUT
    return float(min(timeout, MAX_TIMEOUT_SECONDS)) + _SETTLE_MARGIN


async def find_execution(
    conn: EngineClient,
    decision_id: Any,
    match: Callable[[Mapping[str, Any]], bool],
    *,
    settle: float = 0.0,
) -> tuple[ExecutionReceipt, Mapping[str, Any]] | None:
    """An execution of ``decision_id`` on the engine, whatever its delivery status.

    Args:
        conn: the engine connection.
        decision_id: the decision.
        match: the test of an execution's ``metadata.algenta_graph`` tag.
        settle: when the execution found is still ``unknown`` (an engine that records a
            delivery before it starts shows it so while it is in flight, e.g. the one a
            crashed process left running), look again for up to this many seconds, so the
            record says how it ended; it stays ``unknown`` if it never ends (the engine died
            during it).

    Returns:
        ``(its receipt, the tag)`` of an execution whose tag ``match``es (a delivered one
        first, else the latest attempt), or ``None``.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + settle
    while True:
        found = await _find_once(conn, decision_id, match)
        if found is None or found[0].execution_status != "unknown":
            return found
        if loop.time() >= deadline:
            return found
        await asyncio.sleep(_SETTLE_POLL)


async def _find_once(
    conn: EngineClient, decision_id: Any, match: Callable[[Mapping[str, Any]], bool]
) -> tuple[ExecutionReceipt, Mapping[str, Any]] | None:
    if not isinstance(decision_id, str):
        return None
    try:
        record = await conn.get_decision(decision_id)
    except AlgentaGraphError:
        return None
    executions = record.get("executions") if isinstance(record, Mapping) else None
    found: list[tuple[ExecutionReceipt, Mapping[str, Any]]] = []
    for execution in executions or []:
        if not isinstance(execution, Mapping):
            continue
        meta = execution.get("metadata")
        tag = meta.get("algenta_graph") if isinstance(meta, Mapping) else None
        if not isinstance(tag, Mapping) or not match(tag):
            continue
        fields = {
            k: v
            for k, v in execution.items()
            if k not in {"force", "override_safety", "metadata", "kind"}
        }
        outcome = parse_execution_outcome(fields)
        if isinstance(outcome, ExecutionReceipt) and outcome.decision_id == decision_id:
            found.append((outcome, tag))
    # a delivered execution first; else the latest attempt
    delivered = [f for f in found if f[0].execution_status == "delivered"]
    if delivered:
        return delivered[0]
    return found[-1] if found else None


async def recover_execution(
    conn: EngineClient, decision_id: Any, thread_id: str | None, settle: float = 0.0
) -> ExecutionReceipt | None:
    """Crash recovery: this thread's own earlier execution, read back from the engine."""
    if thread_id is None:
        return None
    found = await find_execution(
        conn, decision_id, lambda tag: tag.get("thread_id") == thread_id, settle=settle
    )
    return found[0] if found is not None else None
