"""The per-gate denial handler nodes: each applies its gate's policy to a step's denials.

One implementation, instantiated per gate (:class:`DenialHandler`), so each gate has its own
node and its own labelled edge. A step's denials are handled strictest policy first
(``docs/ARCHITECTURE.md``, invariant 7): the conditional edge after ``governed_tool`` enters the
handler of the strictest gate, and each handler passes the step on to the next gate's handler,
then to the model. Every denial carries the policy it was raised under, so a resume never
depends on the resuming caller's settings:

- ``halt``: the run ends (a step with any halting denial halts; no operator is asked);
- ``report``: nothing to do (the model was already told which gate blocked which call);
- ``escalate``: one ``interrupt()`` per gate listing that gate's pending denials
  (:mod:`algenta_graph.nodes.answers`: what is asked, what an answer may be). A malformed
  answer interrupts again with an ``error`` and does nothing.

A valid answer is **claimed** under the escalation's own identity
(:mod:`algenta_graph.governance.claims`, invariant 12) before any side effect: exactly one
answer takes effect, whichever thread (a copy), task (after a cancel) or process gives it; an
answer given elsewhere is completed here in its operator's name, never asked again; one being
applied by a live claimant raises :class:`~algenta_graph.errors.EscalationAlreadyDecided`. An
override re-executes on the operator path (the executor's
:meth:`~algenta_graph.nodes.executor.DecisionExecutor.override`), tagged with the operator's
identity; the receipt (or the engine's new denial) and an operator decision are recorded in
the operator's name, and the model is told.

When a node resumes, LangGraph replays the earlier answers to its interrupts in order, and each
is validated again under the *current* caller; the served graph therefore stamps every resume
with the authenticated identity (:mod:`algenta_graph.serving.auth`), so an answer refused for
one operator can never take effect in another's name.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END
from langgraph.types import Command, interrupt

from algenta_graph._langgraph import checkpointer_of
from algenta_graph.audit.chain import seal
from algenta_graph.connection.engine import EXECUTE_TOOL
from algenta_graph.connection.outcomes import ExecutionDenial, ExecutionReceipt
from algenta_graph.errors import EscalationAlreadyDecided
from algenta_graph.governance.claims import (
    HEARTBEAT_SECONDS,
    Claim,
    ClaimStore,
    claims_for,
    escalation_key,
    new_claim,
    release,
)
from algenta_graph.governance.gates import GATES, OVERRIDE_FLAGS, POLICIES
from algenta_graph.nodes.answers import (
    AuthorizeOperator,
    OperatorAnswer,
    authenticated_identity,
    escalation_request,
    parse_resume,
    pending_escalations,
)
from algenta_graph.nodes.executor import DecisionExecutor
from algenta_graph.nodes.steps import (
    OUTCOME_KEY,
    gate_order,
    last_step,
    message_text,
    receipt_text,
    step_denials,
    tool_message,
)
from algenta_graph.state import (
    DecisionResult,
    DenialRecord,
    GovernedState,
    OperatorDecisionRecord,
    ReceiptRecord,
    denial_record,
    escalation_id_of,
    operator_decision_record,
    receipt_record,
)

__all__ = [
    "MODEL_NODE",
    "UNFINISHED_STEP",
    "DenialHandler",
    "handler_node_name",
    "route_pending_escalation",
]

logger = logging.getLogger(__name__)

MODEL_NODE = "model"


def handler_node_name(gate: str) -> str:
    """The node that applies the policy for ``gate``: ``denial_handler_<gate>``."""
    return f"denial_handler_{gate}"


UNFINISHED_STEP = "unfinished step"
"""The route of a new turn whose thread has a governed step that never finished."""


def route_pending_escalation(state: Mapping[str, Any]) -> str:
    """Where a new turn goes after retrieval, so that no run passes unfinished governance.

    - ``"unfinished step"`` (to ``governed_tool``) when the latest tool step has calls without
      an answer: a run cancelled or killed in the middle of it, then a new message. The step is
      finished first (recovering from the engine what it did) and recorded, then the turn goes
      on (``docs/ARCHITECTURE.md``, invariant 13);
    - ``"<gate> pending"`` (to that gate's handler, which asks the operator again, or completes
      an answer given elsewhere) for the latest step's first gate with an unanswered escalation
      (invariant 12); a step that halted asked nobody, and stays so;
    - else ``"model"``.

    >>> route_pending_escalation({"messages": [], "denials": []})
    'model'
    """
    ai, answers = last_step(state.get("messages", []))
    if ai is not None and {c["id"] for c in ai.tool_calls} - {m.tool_call_id for m in answers}:
        return UNFINISHED_STEP
    denials = step_denials(state)
    if any(d.get("policy") == "halt" for d in denials):
        return MODEL_NODE
    waiting = {d.get("gate") for d in pending_escalations(state)}
    first = next((g for g in gate_order(denials) if g in waiting and g in GATES), None)
    return MODEL_NODE if first is None else f"{first} pending"


class DenialHandler:
    """The denial handler node of one gate (see the module docs).

    Args:
        gate: the gate whose denials it handles (its node is ``denial_handler_<gate>``).
        executor: the graph's one :class:`~algenta_graph.nodes.executor.DecisionExecutor`,
            which executes an override on the operator path.
        authorize_operator: an app's own rule for who may answer an escalation of this gate
            (:data:`~algenta_graph.nodes.answers.AuthorizeOperator`); an operator it refuses is
            asked again, and the answer takes no effect.
    """

    def __init__(
        self,
        gate: str,
        executor: DecisionExecutor,
        *,
        authorize_operator: AuthorizeOperator | None = None,
    ) -> None:
        self.gate = gate
        self.executor = executor
        self.authorize_operator = authorize_operator
        self.__name__ = handler_node_name(gate)

    def _next(self, order: Sequence[str]) -> str:
        later = list(order[order.index(self.gate) + 1 :]) if self.gate in order else []
        later = [g for g in later if g in GATES]
        return handler_node_name(later[0]) if later else MODEL_NODE

    async def __call__(self, state: GovernedState, config: RunnableConfig) -> Command[Any]:
        """Apply the gate's policy to the latest step's denials of this gate.

        Returns:
            Where the run goes next (the next gate's handler, the model, or ``END`` on
            ``halt``) and, after an answer, its records and the model's messages.

        Raises:
            EscalationAlreadyDecided: a live claimant elsewhere is applying its answer to this
                escalation.
        """
        denials = step_denials(state)
        order = gate_order(denials)
        mine = [d for d in denials if d.get("gate") == self.gate]
        recorded = [d.get("policy") for d in mine if d.get("policy") in POLICIES]
        policy = max(recorded, key=POLICIES.index) if recorded else GATES[self.gate].default_policy
        if policy == "halt":
            return Command(goto=END)
        if policy == "report":
            return Command(goto=self._next(order))
        answered = {d.get("tool_call_id") for d in state.get("operator_decisions") or []}
        pending = [d for d in mine if d.get("tool_call_id") not in answered]
        if not pending:
            return Command(goto=self._next(order))
        store = claims_for(checkpointer_of(config))
        key = escalation_key(escalation_id_of(d) for d in pending)
        # 0. an escalation answered before -- in a copy of this thread or its original, by a run
        #    that was cancelled or died, in another process -- is never asked again: that answer
        #    is completed here, in its operator's name (invariant 12)
        earlier = await store.get(key)
        if earlier is not None:
            claim = await self._adopt(store, earlier)
        else:
            # 1. the interrupt first: no side effect may precede it (the node re-runs on resume)
            request = escalation_request(self.gate, pending)
            error: str | None = None
            while True:
                raw = interrupt({**request, "error": error} if error else request)
                try:
                    answer = parse_resume(raw, len(pending))
                    operator = self._operator(answer, config)
                    break
                except ValueError as exc:
                    error = f"invalid resume payload: {exc}"
            # 2. exactly one answer takes effect: claim it before any side effect
            thread_id = (config.get("configurable") or {}).get("thread_id")
            claim = await self._claim(store, key, answer.as_claim(operator, thread_id))
        # 3. side effects, in the name of the claim's operator
        update = await self._settle(store, claim, pending, state, config)
        return Command(goto=self._next(order), update=seal(state, update))

    def _operator(self, answer: OperatorAnswer, config: RunnableConfig) -> str:
        identity = authenticated_identity(config)
        if identity is not None and answer.operator is not None and answer.operator != identity:
            raise ValueError(
                f"operator {answer.operator!r} contradicts the authenticated identity {identity!r}"
            )
        operator = identity or answer.operator
        if not operator:
            raise ValueError("operator: who decides is required")
        if self.authorize_operator is not None and not self.authorize_operator(
            operator, self.gate, config
        ):
            raise ValueError(f"operator {operator!r} may not answer a {self.gate} escalation")
        return operator

    @staticmethod
    async def _claim(store: ClaimStore, key: str, answer: dict[str, Any]) -> Claim:
        """Claim ``key`` for ``answer``; or the claim already in force, to be completed."""
        mine = new_claim(key, answer)
        current = await store.claim(mine)
        if current.token == mine.token:
            return mine
        release(mine)
        return await DenialHandler._adopt(store, current)

    @staticmethod
    async def _adopt(store: ClaimStore, current: Claim) -> Claim:
        """The claim in force, to be completed in its operator's name; or who decided.

        A finished claim is completed again (its checkpoint may be lost, or this is a copy of
        its thread): idempotent, as the override finds its own execution at the engine and sends
        nothing. An abandoned one is taken over by compare-and-set. A live one, still being
        applied elsewhere, raises :class:`EscalationAlreadyDecided` naming its operator.
        """
        if current.done:
            return current
        mine = new_claim(current.key, current.answer)
        if current.abandoned() and await store.take_over(current, mine):
            # the claimant is gone before finishing: complete its answer, in its name
            return Claim(current.key, current.answer, mine.token, mine.host, mine.pid, mine.at)
        release(mine)
        raise EscalationAlreadyDecided(current)

    async def _settle(
        self,
        store: ClaimStore,
        claim: Claim,
        pending: Sequence[Mapping[str, Any]],
        state: GovernedState,
        config: RunnableConfig,
    ) -> dict[str, Any]:
        """Apply the claim's answer, keeping the claim alive meanwhile; then mark it finished.

        A run cancelled (or killed) here leaves the claim unfinished and let go, so the next run
        on this escalation, wherever it runs, takes it over and completes it.
        """
        heartbeat = asyncio.ensure_future(_keep_alive(store, claim))
        try:
            update = await self._apply(claim, pending, state, config)
            await store.finish(claim)
        finally:
            heartbeat.cancel()
            release(claim)
        return update

    async def _apply(
        self,
        claim: Claim,
        pending: Sequence[Mapping[str, Any]],
        state: GovernedState,
        config: RunnableConfig,
    ) -> dict[str, Any]:
        thread_id = (config.get("configurable") or {}).get("thread_id")
        operator = claim.operator
        elsewhere = claim.thread_id if claim.thread_id not in (None, thread_id) else None
        where = f" (answered in thread {elsewhere})" if elsewhere else ""
        _, answered = last_step(state.get("messages", []))
        by_call = {m.tool_call_id: m for m in answered}
        receipts: list[ReceiptRecord] = []
        denials: list[DenialRecord] = []
        decisions: list[OperatorDecisionRecord] = []
        messages: list[ToolMessage] = []
        flag = OVERRIDE_FLAGS[self.gate]
        for denial, decided in zip(pending, claim.answer["decisions"], strict=True):
            action, reason = decided["action"], decided["reason"]
            call_id = denial.get("tool_call_id")
            escalation_id = escalation_id_of(denial)
            decision_id = denial.get("decision_id")
            outcome_dump: dict[str, Any] | None = None
            result: DecisionResult
            if action == "decline":
                result = "declined"
                note = (
                    f"Operator {operator} reviewed the {self.gate} denial and DECLINED to "
                    f"override it ({reason}){where}. Decision {decision_id} was not executed."
                )
            else:
                outcome = await self.executor.override(
                    denial,
                    operator,
                    reason,
                    flag,
                    str(thread_id) if thread_id else None,
                    state.get("messages", []),
                    answered_in=elsewhere,
                )
                outcome_dump = outcome.model_dump(mode="json")
                if isinstance(outcome, ExecutionReceipt):
                    result = "receipt" if outcome.execution_status == "delivered" else "failed"
                    receipts.append(
                        receipt_record(
                            outcome, tool_call_id=call_id, source="operator", operator=operator
                        )
                    )
                    note = (
                        f"Operator {operator} OVERRODE the {self.gate} gate ({reason}){where} "
                        f"with {flag}. " + receipt_text(outcome)
                    )
                elif isinstance(outcome, ExecutionDenial):
                    result = "denied"
                    denials.append(
                        denial_record(
                            outcome,
                            decision_id=decision_id,
                            webhook_url=denial.get("webhook_url"),
                            tool_call_id=call_id,
                            source="operator",
                        )
                    )
                    note = (
                        f"Operator {operator} tried to override the {self.gate} gate, but the "
                        f"engine denied the override too: {outcome.gate} gate ({outcome.code}): "
                        f"{outcome.message}. Nothing was executed."
                    )
                else:
                    result = "failed"
                    note = (
                        f"Operator {operator} overrode the {self.gate} gate, but the execution "
                        f"failed: {outcome.message}"
                    )
            decisions.append(
                operator_decision_record(
                    operator=operator,
                    reason=reason,
                    action=action,
                    gate=self.gate,
                    decision_id=decision_id,
                    override_flag=flag,
                    result=result,
                    outcome=outcome_dump,
                    tool_call_id=call_id,
                    escalation_id=escalation_id,
                    answered_in_thread=elsewhere,
                )
            )
            original = by_call.get(call_id or "")
            if original is not None:
                messages.append(
                    tool_message(
                        f"{note}\n(The model's call was first denied: {message_text(original)})",
                        name=EXECUTE_TOOL,
                        tool_call_id=original.tool_call_id,
                        msg_id=original.id,
                        outcome=original.response_metadata.get(OUTCOME_KEY, "ok"),
                        status="success" if result == "receipt" else "error",
                    )
                )
        return {
            "messages": messages,
            "receipts": receipts,
            "denials": denials,
            "operator_decisions": decisions,
        }


async def _keep_alive(store: ClaimStore, claim: Claim) -> None:
    """Refresh ``claim`` until cancelled.

    Every :data:`~algenta_graph.governance.claims.HEARTBEAT_SECONDS`; a missed refresh is logged
    (it only shortens the lease).
    """
    while True:
        await asyncio.sleep(HEARTBEAT_SECONDS)
        try:
            await store.refresh(claim)
        except Exception as exc:  # a missed refresh only shortens the lease; never fatal
            logger.warning("escalation claim %s: refresh failed: %s", claim.key, exc)
