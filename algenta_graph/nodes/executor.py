"""The execution of a decision: the one place that sends ``execute_decision``.

:class:`DecisionExecutor` is held by the ``governed_tool`` node (the model's path) and by every
denial handler (the operator's path); neither node module imports the other. It supplies what
only the graph may (``idempotency_key``, the plan's ``nonce``: ``docs/ARCHITECTURE.md``
invariant 11, :mod:`algenta_graph.nodes.arguments`), never sends a decision this thread executed
again (invariant 8), finds its own earlier executions at the engine and waits for one still in
flight (invariant 5, :mod:`algenta_graph.nodes.recovery`), and sends the override flags only on
the operator path (invariants 1 and 14). Checking the model's arguments and reading executions
back are those modules'; sending, and what a send's outcome is recorded as, are this one's.

Example (over an open :class:`~algenta_graph.connection.engine.EngineConnection`)::

    executor = DecisionExecutor(conn)
    found = await executor.find("dec_1", lambda tag: tag.get("thread_id") == "t1", settle=15)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage, ToolMessage

from algenta_graph.connection.client import EXECUTE_TOOL, EngineClient
from algenta_graph.connection.outcomes import (
    ExecutionDenial,
    ExecutionFailure,
    ExecutionOutcome,
    ExecutionReceipt,
    parse_execution_outcome,
)
from algenta_graph.errors import AlgentaGraphError
from algenta_graph.governance.gates import ENGINE_GATE_NAMES, policy_for
from algenta_graph.governance.run_settings import RunSettings
from algenta_graph.governance.scrub import GRAPH_SUPPLIED_FIELDS
from algenta_graph.nodes.arguments import bad_arguments, graph_supplied
from algenta_graph.nodes.recovery import find_execution, recover_execution, settle_for
from algenta_graph.nodes.steps import denial_text, receipt_text, tool_message
from algenta_graph.records import (
    DenialRecord,
    ReceiptRecord,
    RecordSource,
    denial_record,
    escalation_id_of,
    receipt_record,
)

__all__ = ["DecisionExecutor", "for_decision"]


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


class DecisionExecutor:
    """Sends, finds and recovers executions of decisions over one engine connection.

    Args:
        conn: the engine connection (:class:`~algenta_graph.connection.client.EngineClient`).
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

        :func:`~algenta_graph.nodes.arguments.graph_supplied` over this executor's connection.
        """
        return await graph_supplied(self.conn, decision_id, attempt, messages)

    async def find(
        self,
        decision_id: Any,
        match: Callable[[Mapping[str, Any]], bool],
        *,
        settle: float = 0.0,
    ) -> tuple[ExecutionReceipt, Mapping[str, Any]] | None:
        """An execution of ``decision_id`` on the engine whose tag ``match``es, settled.

        :func:`~algenta_graph.nodes.recovery.find_execution` over this executor's connection.
        """
        return await find_execution(self.conn, decision_id, match, settle=settle)

    async def recover(
        self, decision_id: Any, thread_id: str | None, settle: float = 0.0
    ) -> ExecutionReceipt | None:
        """Crash recovery: this thread's own earlier execution, read back from the engine."""
        return await recover_execution(self.conn, decision_id, thread_id, settle)
