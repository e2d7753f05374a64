"""The arguments of an ``execute_decision`` call: the model's checked, the graph's supplied.

The model's arguments are checked before anything is sent (:func:`bad_arguments`: the ids are
strings, ``timeout_seconds`` within :data:`MIN_TIMEOUT_SECONDS` to :data:`MAX_TIMEOUT_SECONDS`);
what only the graph may supply (``docs/ARCHITECTURE.md``, invariant 11) is added by
:func:`graph_supplied`: an ``idempotency_key`` per attempt (:func:`idempotency_key`) and the
single-use ``nonce`` of the plan the engine binds the decision to (:func:`plan_nonce`,
:func:`bound_plans`), never guessed by hash. Not the sending: that is the executor's
(:mod:`algenta_graph.nodes.executor`).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage, ToolMessage

from algenta_graph.connection.client import PLAN_TOOL, EngineClient
from algenta_graph.connection.outcomes import tool_result_json
from algenta_graph.errors import AlgentaGraphError

__all__ = [
    "MAX_TIMEOUT_SECONDS",
    "MIN_TIMEOUT_SECONDS",
    "bad_arguments",
    "bound_plans",
    "graph_supplied",
    "idempotency_key",
    "plan_nonce",
]

MIN_TIMEOUT_SECONDS = 1.0
"""The shortest ``timeout_seconds`` the graph sends (a shorter one only manufactures deliveries
of unknown outcome, which count as executed)."""


MAX_TIMEOUT_SECONDS = 60.0
"""The longest ``timeout_seconds`` the graph sends."""


def bad_arguments(args: Mapping[str, Any]) -> list[str]:
    """What is wrong with a model's ``execute_decision`` arguments (nothing: ``[]``)."""
    bad = [
        f"{key} must be a string, got {type(args.get(key)).__name__}"
        for key in ("decision_id", "webhook_url")
        if not isinstance(args.get(key), str)
    ]
    if "timeout_seconds" in args:
        t = args["timeout_seconds"]
        if (
            isinstance(t, bool)
            or not isinstance(t, int | float)
            or not math.isfinite(t)
            or not MIN_TIMEOUT_SECONDS <= t <= MAX_TIMEOUT_SECONDS
        ):
            bad.append(
                f"timeout_seconds must be a number from {MIN_TIMEOUT_SECONDS:g} to "
                f"{MAX_TIMEOUT_SECONDS:g}, got {t!r}"
            )
    return bad


def idempotency_key(attempt: str) -> str:
    """An engine idempotency key for one attempt (at most 200 characters).

    >>> idempotency_key("t1:call_1")
    'algenta-graph:t1:call_1'
    >>> len(idempotency_key("t" * 500))
    85
    """
    key = f"algenta-graph:{attempt}"
    if len(key) <= 200:
        return key
    return "algenta-graph:sha256:" + hashlib.sha256(attempt.encode()).hexdigest()


def plan_nonce(
    messages: Sequence[BaseMessage],
    plan_hash: str,
    *,
    plan_ids: Collection[str] | None = None,
    decision_id: str = "the decision",
) -> str | None:
    """The nonce of the plan a decision runs under, from this thread's ``plan_decision`` results.

    Bound by plan id, never guessed by hash (``docs/ARCHITECTURE.md``, invariant 11).

    Args:
        messages: the thread's messages; its ``plan_decision`` results are read.
        plan_hash: the ``plan_hash`` the decision was logged with.
        plan_ids: the plans the engine binds the decision to (its ``plan_id``, or every plan it
            lists for the decision as approved); then only those plans' results count. Without
            them, the results with ``plan_hash`` count.
        decision_id: the decision, as the error names it.

    Returns:
        One nonce when exactly one plan counts; ``None`` when no result counts.

    Raises:
        AlgentaGraphError: several plans count; it names them (every proposal of one scenario
            has the same hash: which one approved this decision cannot be told apart, so
            nothing is sent).
    """
    found: dict[str, str] = {}  # plan id (or the nonce, for a result without one) -> nonce
    for message in messages:
        if not isinstance(message, ToolMessage) or not str(message.name or "").endswith(PLAN_TOOL):
            continue
        body = _result_json(message)
        nonce, plan_id = body.get("nonce"), body.get("plan_id")
        if body.get("plan_hash") != plan_hash or not isinstance(nonce, str):
            continue
        if plan_ids is not None and plan_id not in plan_ids:
            continue
        found[str(plan_id) if isinstance(plan_id, str) and plan_id else nonce] = nonce
    if len(found) > 1:
        plans = ", ".join(k for k in found if k not in found.values()) or f"{len(found)} plans"
        raise AlgentaGraphError(
            f"plan_ambiguous: {len(found)} plan_decision results in this thread could be the "
            f"plan of {decision_id} (plan_hash {plan_hash}; {plans}); which one approved it "
            "cannot be told apart, so nothing was sent: log the decision with its plan_id"
        )
    return next(iter(found.values()), None)


def bound_plans(decision: Mapping[str, Any]) -> frozenset[str] | None:
    """The plans the engine says a decision may run under.

    Those it lists for the decision as ``approved`` (``plans``: ``[{plan_id, state}]``), else the
    ``plan_id`` it was logged with; ``None`` when the engine names no plan (then the thread's
    results are read by hash).

    >>> sorted(bound_plans({"plan_id": "p1", "plans": [{"plan_id": "p1", "state": "executed"},
    ...                                                  {"plan_id": "p2", "state": "approved"}]}))
    ['p2']
    >>> bound_plans({"plan_id": "p1"}), bound_plans({})
    (frozenset({'p1'}), None)
    """
    plans = decision.get("plans")
    if isinstance(plans, list) and plans:
        return frozenset(
            str(p["plan_id"])
            for p in plans
            if isinstance(p, Mapping) and p.get("state") == "approved" and p.get("plan_id")
        )
    plan_id = decision.get("plan_id")
    return frozenset({plan_id}) if isinstance(plan_id, str) and plan_id else None


def _result_json(message: ToolMessage) -> Mapping[str, Any]:
    data = tool_result_json(message)
    return data if isinstance(data, Mapping) else {}


def _engine_nonce(plan: Any, plan_ids: frozenset[str] | None) -> str | None:
    """The nonce ``get_decision`` reports for the decision's bound plan.

    Only if that plan is one of ``plan_ids`` (never a plan the engine does not bind the decision
    to).

    >>> _engine_nonce({"plan_id": "p1", "nonce": "n1"}, frozenset({"p1"}))
    'n1'
    >>> _engine_nonce({"plan_id": "p2", "nonce": "n2"}, frozenset({"p1"})) is None
    True
    """
    if not isinstance(plan, Mapping) or not plan_ids or plan.get("plan_id") not in plan_ids:
        return None
    nonce = plan.get("nonce")
    return nonce if isinstance(nonce, str) and nonce else None


async def graph_supplied(
    conn: EngineClient, decision_id: str, attempt: str, messages: Sequence[BaseMessage]
) -> dict[str, str]:
    """The ``execute_decision`` arguments only the graph supplies.

    For the fields the engine declares (see ``algenta_graph/engine/README.md``, "The strict
    flow"):

    - ``idempotency_key``: one per attempt, from the thread and the tool call;
    - ``nonce``: the single-use nonce of the plan the engine binds the decision to (its
      ``plan_id``), from this thread's ``plan_decision`` results, else as ``get_decision``
      reports it; never guessed by hash (:func:`plan_nonce`).

    Raises:
        AlgentaGraphError: naming what is missing (nothing is sent then).
    """
    wanted = conn.execute_supplied
    out: dict[str, str] = {}
    if "idempotency_key" in wanted:
        out["idempotency_key"] = idempotency_key(attempt)
    if "nonce" in wanted:
        record = await conn.get_decision(decision_id)
        found = record.get("decision")
        decision: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        plan_hash = decision.get("plan_hash")
        if not isinstance(plan_hash, str) or not plan_hash:
            raise AlgentaGraphError(
                f"decision {decision_id} was logged without a plan_hash; this engine executes "
                "only a decision logged with the plan_hash of a plan_decision result"
            )
        plan_ids = bound_plans(decision)
        nonce = plan_nonce(messages, plan_hash, plan_ids=plan_ids, decision_id=decision_id)
        if nonce is None:
            # a plan proposed outside this thread (over the engine's HTTP API): the engine
            # reports the nonce of the decision's own plan while it is unspent
            nonce = _engine_nonce(record.get("plan"), plan_ids)
        if nonce is None:
            which = f"of plan {', '.join(sorted(plan_ids))}" if plan_ids else "has plan_hash"
            raise AlgentaGraphError(
                f"no plan_decision result in this thread {which} {plan_hash}; call "
                "plan_decision (and have an operator approve the plan) before executing"
            )
        out["nonce"] = nonce
    return out
