"""The execution of a decision: the one place that sends ``execute_decision``.

:class:`DecisionExecutor` is held by the ``governed_tool`` node (the model's path) and by every
denial handler (the operator's path); neither node module imports the other. It supplies what
only the graph may (``idempotency_key``, the plan's ``nonce``: ``docs/ARCHITECTURE.md``
invariant 11), never sends a decision this thread executed again (invariant 8), finds its own
earlier executions at the engine and waits for one still in flight (invariant 5), and sends the
override flags only on the operator path (invariants 1 and 14).

Example (over an open :class:`~algenta_graph.connection.engine.EngineConnection`)::

    executor = DecisionExecutor(conn)
    found = await executor.find("dec_1", lambda tag: tag.get("thread_id") == "t1", settle=15)
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage, ToolMessage

from algenta_graph.connection.engine import EXECUTE_TOOL, PLAN_TOOL, EngineClient
from algenta_graph.connection.outcomes import (
    ExecutionDenial,
    ExecutionFailure,
    ExecutionOutcome,
    ExecutionReceipt,
    parse_execution_outcome,
    tool_result_json,
)
from algenta_graph.errors import AlgentaGraphError
from algenta_graph.governance.gates import ENGINE_GATE_NAMES, policy_for
from algenta_graph.governance.run_settings import RunSettings
from algenta_graph.governance.scrub import GRAPH_SUPPLIED_FIELDS
from algenta_graph.nodes.steps import denial_text, receipt_text, tool_message
from algenta_graph.records import (
    DenialRecord,
    ReceiptRecord,
    RecordSource,
    denial_record,
    escalation_id_of,
    receipt_record,
)

__all__ = [
    "MAX_TIMEOUT_SECONDS",
    "MIN_TIMEOUT_SECONDS",
    "DecisionExecutor",
    "bad_arguments",
    "bound_plans",
    "counts_as_executed",
    "for_decision",
    "idempotency_key",
    "plan_nonce",
    "settle_for",
]

MIN_TIMEOUT_SECONDS = 1.0
"""The shortest ``timeout_seconds`` the graph sends (a shorter one only manufactures deliveries
of unknown outcome, which count as executed)."""


MAX_TIMEOUT_SECONDS = 60.0


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


def for_decision(outcome: ExecutionOutcome, decision_id: str) -> ExecutionOutcome:
    """``outcome``, unless it is a receipt for another decision: that is a failure.

    Such a receipt is never a receipt of this call (it would also block that other decision in
    this thread).
    """
    if isinstance(outcome, ExecutionReceipt) and outcome.decision_id != decision_id:
        return ExecutionFailure(
            message=(
                f"the engine answered with a receipt for decision {outcome.decision_id!r}, "
                f"not the decision executed ({decision_id!r})"
            ),
            raw=outcome.model_dump_json(),
        )
    return outcome


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


class DecisionExecutor:
    """Sends, finds and recovers executions of decisions over one engine connection.

    Args:
        conn: the engine connection (:class:`~algenta_graph.connection.engine.EngineClient`).
    """

    def __init__(self, conn: EngineClient) -> None:
        self.conn = conn

    async def execute(
        self,
        args: dict[str, Any],
        call_id: str,
        run: RunSettings,
        executed: set[Any],
        messages: Sequence[BaseMessage] = (),
    ) -> tuple[ToolMessage, ReceiptRecord | None, DenialRecord | None]:
        """Execute the model's ``execute_decision`` call: its answer, and its receipt or denial.

        Malformed arguments are named and never sent; a decision in ``executed`` (this thread's)
        is never sent again (invariant 8); an idempotency denial of this thread's own earlier
        delivery recovers its receipt (invariant 5); anything but a receipt or a named-gate
        denial is a failure, never a receipt (invariant 3).
        """
        # never the model's: the graph supplies these itself, when the engine declares them
        args = {k: v for k, v in args.items() if k not in GRAPH_SUPPLIED_FIELDS}
        decision_id = args.get("decision_id")
        webhook_url = args.get("webhook_url")

        def error(text: str, artifact: Any = None) -> ToolMessage:
            return tool_message(
                text,
                name=EXECUTE_TOOL,
                tool_call_id=call_id,
                outcome="failed",
                status="error",
                artifact=artifact,
            )

        bad = bad_arguments(args)
        if bad:
            # malformed model arguments: named, never sent, never a crash of the graph
            return error(f"Error: execute_decision was not called: {'; '.join(bad)}"), None, None
        assert isinstance(decision_id, str) and isinstance(webhook_url, str)

        def denied(outcome: ExecutionDenial, source: RecordSource) -> DenialRecord:
            timeout = args.get("timeout_seconds")
            return denial_record(
                outcome,
                decision_id=decision_id,
                webhook_url=webhook_url,
                tool_call_id=call_id,
                source=source,
                # a graph-side gate named by an engine is no engine gate: it halts
                policy=policy_for(outcome.gate, run.policies)
                if outcome.gate in ENGINE_GATE_NAMES
                else "halt",
                timeout_seconds=timeout if isinstance(timeout, int | float) else None,
            )

        def denial_message(outcome: ExecutionDenial, artifact: Any = None) -> ToolMessage:
            return tool_message(
                denial_text(decision_id, outcome),
                name=EXECUTE_TOOL,
                tool_call_id=call_id,
                outcome=f"gate:{outcome.gate}",
                status="error",
                artifact=artifact,
            )

        if decision_id in executed:
            denial = ExecutionDenial(
                gate="idempotency",
                code="execution_blocked_idempotency",
                message=(
                    f"decision {decision_id} was already executed in this thread (its receipt is "
                    "in the thread's state; a delivery that failed or timed out may still have "
                    "reached its target); the graph did not send it to the engine again, only an "
                    "operator can"
                ),
            )
            return denial_message(denial), None, denied(denial, "thread_receipts")
        metadata = dict(args["metadata"]) if isinstance(args.get("metadata"), Mapping) else {}
        metadata["algenta_graph"] = {"thread_id": run.thread_id, "tool_call_id": call_id}
        args = {**args, "metadata": metadata}
        try:
            args.update(await self.supplied(decision_id, f"{run.thread_id}:{call_id}", messages))
        except AlgentaGraphError as exc:
            return error(f"Error: execute_decision was not called: {exc}"), None, None
        try:
            result: Any = await self.conn.call_tool(EXECUTE_TOOL, args, tool_call_id=call_id)
        except AlgentaGraphError as exc:
            return (
                error(f"Error: execute_decision for decision {decision_id} failed: {exc}"),
                None,
                None,
            )
        artifact = getattr(result, "artifact", None)
        outcome = parse_execution_outcome(result)
        if isinstance(outcome, ExecutionDenial) and outcome.gate == "idempotency":
            recovered = await self.recover(decision_id, run.thread_id, settle_for(args))
            if recovered is not None:
                record = receipt_record(recovered, tool_call_id=call_id, source="recovered")
                note = " (executed earlier by this thread; receipt recovered)"
                msg = tool_message(
                    receipt_text(recovered, note),
                    name=EXECUTE_TOOL,
                    tool_call_id=call_id,
                    outcome="ok" if recovered.execution_status == "delivered" else "failed",
                    status="success" if recovered.execution_status == "delivered" else "error",
                )
                return msg, record, None
        outcome = for_decision(outcome, decision_id)
        if isinstance(outcome, ExecutionReceipt):
            delivered = outcome.execution_status == "delivered"
            msg = tool_message(
                receipt_text(outcome),
                name=EXECUTE_TOOL,
                tool_call_id=call_id,
                outcome="ok" if delivered else "failed",
                status="success" if delivered else "error",
                artifact=artifact,
            )
            return msg, receipt_record(outcome, tool_call_id=call_id, source="model"), None
        if isinstance(outcome, ExecutionDenial):
            return denial_message(outcome, artifact), None, denied(outcome, "model")
        assert isinstance(outcome, ExecutionFailure)
        return (
            error(
                f"Error: execute_decision for decision {decision_id} returned neither a receipt "
                f"nor a named-gate denial: {outcome.message}",
                artifact,
            ),
            None,
            None,
        )

    async def override(
        self,
        denial: Mapping[str, Any],
        operator: str,
        reason: str | None,
        flag: str,
        thread_id: str | None,
        messages: Sequence[BaseMessage] = (),
        *,
        answered_in: str | None = None,
        edited: Mapping[str, Any] | None = None,
    ) -> ExecutionOutcome:
        """Re-execute an escalated denial on the operator path, with the gate's ``flag``.

        One escalation is overridden at most once, whichever thread (a copy, the original) or
        process completes it: an execution tagged with its ``escalation_id`` is looked for at
        the engine first (and waited for while in flight), and the idempotency key is the
        escalation's, so completing an answer twice sends nothing twice.

        ``edited``: an operator's edit of the call (:func:`~algenta_graph.nodes.answers.
        edited_arguments`: its ``webhook_url``, ``timeout_seconds`` and ``metadata``, already
        scrubbed of every override flag), sent instead of the denied call's; the decision is
        always the denied one.
        """
        decision_id = denial.get("decision_id")
        call = dict(edited or {})
        webhook_url = call.get("webhook_url", denial.get("webhook_url"))
        call_id = denial.get("tool_call_id")
        escalation_id = escalation_id_of(denial)
        if not isinstance(decision_id, str) or not isinstance(webhook_url, str):
            return ExecutionFailure(
                message="the denied call named no decision_id/webhook_url; nothing to override"
            )

        # one escalation is overridden at most once, whichever thread (a copy, the original)
        # or process completes it: a crash after the delivery and before the checkpoint, or a
        # copy of the thread, must not deliver twice
        def ours(tag: Mapping[str, Any]) -> bool:
            if tag.get("escalation_id") is not None:
                return bool(tag.get("escalation_id") == escalation_id)
            return (  # an execution tagged before escalations had their own identity
                tag.get("tool_call_id") == call_id
                and tag.get("thread_id") in (thread_id, answered_in)
                and tag.get("operator") is not None
            )

        timeout = call.get("timeout_seconds", denial.get("timeout_seconds"))
        settle = settle_for({"timeout_seconds": timeout})
        previous = await self.find(decision_id, ours, settle=settle)
        if previous is not None:
            return previous[0]
        metadata = dict(call["metadata"]) if isinstance(call.get("metadata"), Mapping) else {}
        tag: dict[str, Any] = {
            "thread_id": answered_in or thread_id,
            "tool_call_id": call_id,
            "operator": operator,
            "reason": reason,
            "escalation_id": escalation_id,
        }
        if edited is not None:
            tag["edited"] = True
        metadata["algenta_graph"] = tag
        try:
            supplied = await self.supplied(decision_id, f"escalation:{escalation_id}", messages)
            outcome = await self.conn.execute_as_operator(
                decision_id,
                webhook_url,
                force=flag == "force",
                override_safety=flag == "override_safety",
                timeout_seconds=timeout if isinstance(timeout, int | float) else None,
                metadata=metadata,
                extra=supplied,
            )
        except AlgentaGraphError as exc:
            return ExecutionFailure(message=f"operator execution failed: {exc}")
        if isinstance(outcome, ExecutionDenial) and outcome.gate == "idempotency":
            # our own override was still in flight when we looked above (a resumed process
            # races the crashed one's delivery); the engine serialised us behind it
            delivered = await self.find(decision_id, ours, settle=settle)
            if delivered is not None:
                return delivered[0]
        return for_decision(outcome, decision_id)

    async def supplied(
        self, decision_id: str, attempt: str, messages: Sequence[BaseMessage]
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
        wanted = self.conn.execute_supplied
        out: dict[str, str] = {}
        if "idempotency_key" in wanted:
            out["idempotency_key"] = idempotency_key(attempt)
        if "nonce" in wanted:
            record = await self.conn.get_decision(decision_id)
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

    async def find(
        self,
        decision_id: Any,
        match: Callable[[Mapping[str, Any]], bool],
        *,
        settle: float = 0.0,
    ) -> tuple[ExecutionReceipt, Mapping[str, Any]] | None:
        """An execution of ``decision_id`` on the engine, whatever its delivery status.

        Args:
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
            found = await self._find_once(decision_id, match)
            if found is None or found[0].execution_status != "unknown":
                return found
            if loop.time() >= deadline:
                return found
            await asyncio.sleep(_SETTLE_POLL)

    async def _find_once(
        self, decision_id: Any, match: Callable[[Mapping[str, Any]], bool]
    ) -> tuple[ExecutionReceipt, Mapping[str, Any]] | None:
        if not isinstance(decision_id, str):
            return None
        try:
            record = await self.conn.get_decision(decision_id)
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

    async def recover(
        self, decision_id: Any, thread_id: str | None, settle: float = 0.0
    ) -> ExecutionReceipt | None:
        """Crash recovery: this thread's own earlier execution, read back from the engine."""
        if thread_id is None:
            return None
        found = await self.find(
            decision_id, lambda tag: tag.get("thread_id") == thread_id, settle=settle
        )
        return found[0] if found is not None else None
