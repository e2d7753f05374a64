"""The per-gate denial handler nodes: each applies its gate's policy to a step's denials.

One implementation, instantiated per gate (:class:`DenialHandler`), so each gate has its own
node and its own labelled edge. A step's denials are handled strictest policy first
(``docs/ARCHITECTURE.md``, invariant 7): the conditional edge after ``governed_tool`` enters the
handler of the strictest gate, and each handler passes the step on to the next gate's handler,
then to the model. Every denial carries the policy it was raised under, so a resume never
depends on the resuming caller's settings:

- ``halt``: the run ends (a step with any halting denial halts; no operator is asked);
- ``report``: nothing to do (the model was already told which gate blocked which call);
- ``escalate``: the operator is asked (:mod:`algenta_graph.nodes.answers`: what is asked, what
  an answer may be): one ``interrupt()`` per gate listing its pending denials (``batched``), or
  one per escalated call (``per_call``), each with a ``response_schema``, so LangGraph refuses a
  bad answer before it is saved and nothing is ever silently asked again.

Before it asks, the handler notifies (:mod:`algenta_graph.governance.notifications`: once per
escalation, whatever process runs it) and, when served, records in the thread's metadata that
the thread waits on its gate (:mod:`algenta_graph.governance.visibility`).

A valid answer is **claimed** under the escalation's own identity
(:mod:`algenta_graph.governance.claims`, invariant 12) before any side effect: exactly one
answer takes effect, whichever thread (a copy), task (after a cancel) or process gives it; an
answer given elsewhere is completed here in its operator's name, never asked again; one being
applied by a live claimant raises :class:`~algenta_graph.errors.EscalationAlreadyDecided`. An
answer that arrives after the escalation's deadline declines it (``expired``), whatever it says.
An approval (or an edit, sent with the edited arguments) re-executes on the operator path (the
executor's :meth:`~algenta_graph.nodes.executor.DecisionExecutor.override`), tagged with the
operator's identity; a ``respond`` gives the model the operator's text and executes nothing.
The receipt, the engine's new denial (routed through its own gate's policy, like any other) and
an operator decision saying who, with which roles, what they were shown, when asked, when
decided and the outcome (invariant 15) are recorded, and the model is told.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END
from langgraph.types import Command, interrupt

from algenta_graph._langgraph import checkpointer_of, interrupt_id
from algenta_graph.audit.chain import seal
from algenta_graph.connection.engine import EXECUTE_TOOL
from algenta_graph.connection.outcomes import ExecutionDenial, ExecutionReceipt, tool_result_json
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
from algenta_graph.governance.escalations import EscalationSettings, deadline, is_overdue
from algenta_graph.governance.gates import (
    DEFAULT_POLICIES,
    ENGINE_GATE_NAMES,
    GATES,
    OVERRIDE_FLAGS,
    POLICIES,
    Policy,
    parse_on_denial,
)
from algenta_graph.governance.notifications import notify_once
from algenta_graph.governance.run_settings import resolve_run_settings
from algenta_graph.governance.tool_gates import CompiledGates, ToolRef, args_digest
from algenta_graph.governance.visibility import MetadataWriter, set_waiting
from algenta_graph.nodes.answers import (
    AuthorizeOperator,
    OperatorAnswer,
    answer_schema,
    authenticated_identity,
    authenticated_roles,
)
from algenta_graph.nodes.executor import DecisionExecutor
from algenta_graph.nodes.held_calls import run_held
from algenta_graph.nodes.questions import (
    EscalationItem,
    escalation_items,
    escalation_request,
    is_answered,
    open_denials,
    pending_escalations,
    reviewed_args,
    tool_approval,
)
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
    OperatorVerdict,
    ReceiptRecord,
    ToolCallRecord,
    denial_record,
    escalation_id_of,
    operator_decision_record,
    receipt_record,
    tool_call_record,
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


def _now() -> datetime:
    return datetime.now(timezone.utc)


class DenialHandler:
    """The denial handler node of one gate (see the module docs).

    Args:
        gate: the gate whose denials it handles (its node is ``denial_handler_<gate>``).
        executor: the graph's one :class:`~algenta_graph.nodes.executor.DecisionExecutor`,
            which executes an override on the operator path.
        authorize_operator: an app's own rule for who may answer an escalation of this gate
            (:data:`~algenta_graph.nodes.answers.AuthorizeOperator`); an answer of an operator
            it refuses is refused (nothing is saved or done).
        settings: how operators are asked and what an answer may be
            (:class:`~algenta_graph.governance.escalations.EscalationSettings`; the defaults
            without it).
        policies: the graph's denial policy per gate (default: the gate table's); a new denial
            the operator path meets is routed under it, tightened by the run's.
        clock: the current time (UTC), for deadlines; ``datetime.now`` by default.
        thread_metadata: the writer of thread metadata (default: the LangGraph server's own,
            when served; none otherwise).
        tool_gates: the graph-side gates' rules: an operator's edit of a held call must keep its
            tool's argument rules (default: none checked).
    """

    def __init__(
        self,
        gate: str,
        executor: DecisionExecutor,
        *,
        authorize_operator: AuthorizeOperator | None = None,
        settings: EscalationSettings | None = None,
        policies: Mapping[str, str] | None = None,
        clock: Callable[[], datetime] | None = None,
        thread_metadata: MetadataWriter | None = None,
        tool_gates: CompiledGates | None = None,
    ) -> None:
        self.gate = gate
        self.tool_gates = tool_gates
        self.executor = executor
        self.authorize_operator = authorize_operator
        self.settings = settings or EscalationSettings()
        self.policies: dict[str, Policy] = {
            **DEFAULT_POLICIES,
            **parse_on_denial(dict(policies or {}), "policies"),
        }
        self.clock = clock or _now
        self.thread_metadata = thread_metadata
        self._snapshots: dict[str, str | None] = {}
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
        order = gate_order(step_denials(state))
        pending = open_denials(state, self.gate)
        if not pending:
            return Command(goto=self._next(order))
        recorded = [d.get("policy") for d in pending if d.get("policy") in POLICIES]
        policy = max(recorded, key=POLICIES.index) if recorded else GATES[self.gate].default_policy
        if policy == "halt":
            return Command(goto=END)
        if policy == "report":
            return Command(goto=self._next(order))
        store = claims_for(checkpointer_of(config))
        key = escalation_key(escalation_id_of(d) for d in pending)
        thread_id = (config.get("configurable") or {}).get("thread_id")
        thread = str(thread_id) if thread_id else None
        # 0. an escalation answered before -- in a copy of this thread or its original, by a run
        #    that was cancelled or died, in another process, expired by the command -- is never
        #    asked again: that answer is completed here, in its operator's name (invariant 12)
        earlier = await store.get(key)
        if earlier is not None:
            claim = await self._adopt(store, earlier)
        else:
            items = await self._items(pending, thread, config)
            # 1. tell who must answer (once per escalation) and who may see it; both are safe to
            #    repeat, as the node runs again from its start when it is resumed
            await self._announce(store, items, thread)
            # 2. the interrupt: no side effect may precede it; the answer arrives validated
            answer = self._ask(items, config)
            now = self.clock()
            expired = [is_overdue(i["expires_at"], now) for i in items]
            operator = answer.operator or "?"
            # 3. exactly one answer takes effect: claim it before any side effect
            claim = await self._claim(
                store,
                key,
                answer.as_claim(
                    operator,
                    items=items,
                    thread_id=thread,
                    roles=authenticated_roles(config),
                    decided_at=now.isoformat(),
                    expired=expired,
                ),
            )
        # 4. side effects, in the name of the claim's operator
        update = await self._settle(store, claim, pending, state, config)
        decisions = [*state.get("operator_decisions", []), *update["operator_decisions"]]
        after = {
            **state,
            "denials": [*state.get("denials", []), *update["denials"]],
            "operator_decisions": decisions,
        }
        decided = [str(d.get("operator")) for d in decisions]
        await set_waiting(thread, [], decided_by=decided, write=self.thread_metadata)
        return Command(goto=self._route(after), update=seal(state, update))

    @staticmethod
    def _route(after: Mapping[str, Any]) -> str:
        """Where a step goes once this gate's escalations are answered.

        To the handler of the strictest gate with denials still to handle (an escalation of
        another gate, or a denial the operator path met, routed like any other); else the model.
        """
        decisions = after.get("operator_decisions") or []
        waiting = [
            d
            for d in step_denials(after)
            if not is_answered(d, decisions) and _policy_of(d) != "report"
        ]
        if not waiting:
            return MODEL_NODE
        first = gate_order(waiting)[0]
        return handler_node_name(first) if first in GATES else END

    # ------------------------------------------------------------------ asking

    async def _items(
        self, pending: Sequence[Mapping[str, Any]], thread: str | None, config: RunnableConfig
    ) -> list[EscalationItem]:
        snapshot = await self._policy_snapshot(pending)
        per_call = self.settings.interrupt_mode == "per_call"
        ids = [interrupt_id(config, i if per_call else 0) for i in range(len(pending))]
        return escalation_items(
            self.gate,
            pending,
            settings=self.settings,
            thread_id=thread,
            policy_snapshot_id=snapshot,
            interrupt_ids=ids,
            expires=lambda d: deadline(self.settings, self.gate, d.get("raised_at")),
        )

    async def _policy_snapshot(self, pending: Sequence[Mapping[str, Any]]) -> str | None:
        """The engine's policy snapshot (``get_contract``), read once per escalation here.

        ``None`` when the engine does not say (or cannot be asked): the digest then binds
        "unknown", and is the same for every answer given meanwhile. A held call of a
        graph-side gate binds none (the engine's policy does not decide it).
        """
        if GATES[self.gate].side == "graph":
            return None
        first = escalation_id_of(pending[0])
        if first in self._snapshots:
            return self._snapshots[first]
        snapshot: str | None = None
        conn = self.executor.conn
        try:
            if conn.is_algenta_tool("get_contract"):
                result = await conn.call_tool("get_contract", {}, tool_call_id=f"policy:{first}")
                body = tool_result_json(result)
                policy = body.get("policy") if isinstance(body, Mapping) else None
                found = policy.get("policy_snapshot_id") if isinstance(policy, Mapping) else None
                snapshot = found if isinstance(found, str) and found else None
        except Exception as exc:  # the digest binds "unknown policy"; the escalation goes on
            logger.info("escalation %s: no policy snapshot from the engine: %s", first, exc)
        for denial in pending:
            self._snapshots[escalation_id_of(denial)] = snapshot
        return snapshot

    async def _announce(
        self, store: ClaimStore, items: Sequence[EscalationItem], thread: str | None
    ) -> None:
        for item in items:
            notice = {
                "escalation_id": item["escalation_id"],
                "thread_id": item["thread_id"],
                "gate": item["gate"],
                "decision_id": item["decision_id"],
                "tool_call_id": item["tool_call_id"],
                "code": item["code"],
                "message": item["message"],
                "digest": item["digest"],
                "asked_at": item["asked_at"],
                "expires_at": item["expires_at"],
                "allowed_decisions": list(item["allowed_decisions"]),
            }
            await notify_once(store, self.settings, notice)
        await set_waiting(thread, [self.gate], write=self.thread_metadata)

    def _ask(self, items: Sequence[EscalationItem], config: RunnableConfig) -> OperatorAnswer:
        """Interrupt for the operator's answer, checked by LangGraph before it is saved."""
        if self.settings.interrupt_mode != "per_call":

            def check(answer: OperatorAnswer) -> OperatorAnswer:
                self._check_edits(answer, items)
                return dataclasses.replace(answer, operator=self._operator(answer, config))

            schema = answer_schema(items, self.settings, per_call=False, check=check)
            answer: OperatorAnswer = interrupt(
                escalation_request(self.gate, items), response_schema=schema
            ).root
            return answer
        decided: list[Any] = []
        first: str | None = None
        for index, item in enumerate(items):

            def check_one(
                answer: OperatorAnswer, index: int = index, first: str | None = first
            ) -> OperatorAnswer:
                operator = self._operator(answer, config)
                if first is not None and operator != first:
                    raise ValueError(
                        f"call {index + 1} of this step: operator {operator!r} is not {first!r}, "
                        "who answered its first call; one operator answers all the calls of a "
                        "step"
                    )
                self._check_edits(answer, [items[index]])
                return dataclasses.replace(answer, operator=operator)

            schema = answer_schema([item], self.settings, per_call=True, check=check_one)
            one: OperatorAnswer = interrupt(tool_approval(item), response_schema=schema).root
            first = first or one.operator
            decided.extend(one.decisions)
        return OperatorAnswer(first, tuple(decided), tuple(i["digest"] for i in items))

    def _check_edits(self, answer: OperatorAnswer, items: Sequence[EscalationItem]) -> None:
        """Refuse an edit of a held call whose arguments break one of its tool's rules.

        Raises:
            ValueError: naming the rule (the answer is refused before it is saved; nothing ran).
        """
        if self.tool_gates is None:
            return
        for decided, item in zip(answer.decisions, items, strict=False):
            if decided.type != "edit" or decided.edited_args is None or not item.get("tool"):
                continue
            server, _, name = str(item.get("tool")).partition(".")
            broken = self.tool_gates.check_arguments(ToolRef(server, name), decided.edited_args)
            if broken is not None:
                raise ValueError(
                    f"edit: {broken.message}; refused, nothing was run: edit within the rule, "
                    "or reject"
                )

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

    # ------------------------------------------------------------------ one answer

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
            if GATES[self.gate].side == "graph":
                update = await self._apply_held(store, claim, pending, state, config)
            else:
                update = await self._apply(claim, pending, state, config)
            await store.finish(claim)
        finally:
            heartbeat.cancel()
            release(claim)
        return update

    def _policy_for(self, gate: str, config: RunnableConfig) -> Any:
        """The policy a new denial of ``gate`` is raised under: the graph's, tightened."""
        policies = resolve_run_settings(config, None, top_k=1, policies=self.policies).policies
        return policies.get(gate, "halt") if gate in ENGINE_GATE_NAMES else "halt"

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
        roles = [str(r) for r in claim.answer.get("roles") or []]
        for denial, decided in zip(pending, claim.answer["decisions"], strict=True):
            action = decided["action"]
            reason: str | None = decided.get("reason")
            verdict: OperatorVerdict = decided.get("verdict") or (
                "overrode" if action == "override" else "declined"
            )
            edited = decided.get("edited_args")
            call_id = denial.get("tool_call_id")
            decision_id = denial.get("decision_id")
            why = f" ({reason})" if reason else ""
            outcome_dump: dict[str, Any] | None = None
            success = False
            result: DecisionResult
            if verdict == "expired":
                result = "declined"
                note = (
                    f"The {self.gate} escalation EXPIRED at {decided.get('expires_at')} before "
                    f"an operator's answer could take effect{where}. Decision {decision_id} was "
                    "not executed."
                )
            elif verdict == "responded":
                result = "declined"
                success = True
                note = (
                    f"{reason}\n(Operator {operator} answered in the tool's place{where}; "
                    f"decision {decision_id} was not executed.)"
                )
            elif action == "decline":
                result = "declined"
                note = (
                    f"Operator {operator} reviewed the {self.gate} denial and DECLINED to "
                    f"override it{why}{where}. Decision {decision_id} was not executed."
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
                    edited=edited,
                )
                outcome_dump = outcome.model_dump(mode="json")
                how = f" with edited arguments {edited}" if verdict == "modified" and edited else ""
                if isinstance(outcome, ExecutionReceipt):
                    result = "receipt" if outcome.execution_status == "delivered" else "failed"
                    success = result == "receipt"
                    receipts.append(
                        receipt_record(
                            outcome, tool_call_id=call_id, source="operator", operator=operator
                        )
                    )
                    note = (
                        f"Operator {operator} OVERRODE the {self.gate} gate{why}{where}{how} "
                        f"with {flag}. " + receipt_text(outcome)
                    )
                elif isinstance(outcome, ExecutionDenial):
                    result = "denied"
                    new = denial_record(
                        outcome,
                        decision_id=decision_id,
                        webhook_url=(edited or {}).get("webhook_url", denial.get("webhook_url")),
                        tool_call_id=call_id,
                        source="operator",
                        policy=self._policy_for(outcome.gate, config),
                        timeout_seconds=_number(
                            (edited or {}).get("timeout_seconds", denial.get("timeout_seconds"))
                        ),
                    )
                    denials.append(new)
                    note = (
                        f"Operator {operator} tried to override the {self.gate} gate{how}, but "
                        f"the engine denied the override too: {outcome.gate} gate "
                        f"({outcome.code}): {outcome.message}. Nothing was executed; that "
                        f"denial goes through the {outcome.gate} gate's policy "
                        f"({new.get('policy')})."
                    )
                else:
                    result = "failed"
                    note = (
                        f"Operator {operator} overrode the {self.gate} gate{how}, but the "
                        f"execution failed: {outcome.message}"
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
                    escalation_id=escalation_id_of(denial),
                    answered_in_thread=elsewhere,
                    verdict=verdict,
                    roles=roles,
                    digest=decided.get("digest"),
                    interrupt_id=decided.get("interrupt_id"),
                    asked_at=decided.get("asked_at") or denial.get("raised_at"),
                    decided_at=claim.answer.get("decided_at"),
                    expires_at=decided.get("expires_at"),
                    original_args=reviewed_args(denial, flag) if edited is not None else None,
                    edited_args=edited if edited is not None else None,
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
                        status="success" if success else "error",
                    )
                )
        return {
            "messages": messages,
            "receipts": receipts,
            "denials": denials,
            "operator_decisions": decisions,
        }

    async def _apply_held(
        self,
        store: ClaimStore,
        claim: Claim,
        pending: Sequence[Mapping[str, Any]],
        state: GovernedState,
        config: RunnableConfig,
    ) -> dict[str, Any]:
        """Apply the claim's answer to held calls of a graph-side gate.

        An approval (or an edit) runs the held call exactly once
        (:func:`~algenta_graph.nodes.held_calls.run_held`); a reject, a ``respond`` or an
        expired escalation runs nothing. Each answer is an operator decision naming the tool
        and the digest of the arguments it ran with; the held call's answer is replaced by
        the outcome, so the model sees it.
        """
        thread_id = (config.get("configurable") or {}).get("thread_id")
        operator = claim.operator
        elsewhere = claim.thread_id if claim.thread_id not in (None, thread_id) else None
        where = f" (answered in thread {elsewhere})" if elsewhere else ""
        _, answered = last_step(state.get("messages", []))
        by_call = {m.tool_call_id: m for m in answered}
        decisions: list[OperatorDecisionRecord] = []
        messages: list[ToolMessage] = []
        ran: list[ToolCallRecord] = []  # a held call that ran counts against the budgets
        roles = [str(r) for r in claim.answer.get("roles") or []]
        for denial, decided in zip(pending, claim.answer["decisions"], strict=True):
            action = decided["action"]
            reason: str | None = decided.get("reason")
            verdict: OperatorVerdict = decided.get("verdict") or (
                "approved" if action == "override" else "declined"
            )
            edited = decided.get("edited_args")
            call_id = denial.get("tool_call_id")
            tool = f"{denial.get('server')}.{denial.get('tool')}"
            why = f" ({reason})" if reason else ""
            held_args = dict(denial.get("args") or {})
            run_args = dict(edited) if edited is not None else held_args
            digest = (
                args_digest(tool, run_args) if edited is not None else denial.get("args_digest")
            )
            outcome_dump: dict[str, Any] | None = None
            success = False
            result: DecisionResult = "declined"
            if verdict == "expired":
                note = (
                    f"The {self.gate} escalation EXPIRED at {decided.get('expires_at')} before "
                    f"an operator's answer could take effect{where}. The call of {tool} was NOT "
                    "run."
                )
            elif verdict == "responded":
                success = True
                note = (
                    f"{reason}\n(Operator {operator} answered in the tool's place{where}; the "
                    f"call of {tool} was not run.)"
                )
            elif action == "decline":
                note = (
                    f"Operator {operator} REJECTED the call of {tool}{why}{where}. It was NOT "
                    "run; do not call it again for this request."
                )
            else:
                outcome = await run_held(
                    self.executor.conn, store, denial, run_args, operator=operator
                )
                outcome_dump = dataclasses.asdict(outcome)
                result = outcome.result
                ran.append(
                    tool_call_record(
                        tool=str(denial.get("tool")),
                        server=str(denial.get("server")),
                        catalog_name=str(denial.get("catalog_name") or denial.get("tool")),
                        tool_call_id=call_id,
                        args_digest=str(digest),
                        turn=denial.get("turn"),
                    )
                )
                success = outcome.result == "executed"
                how = f" with edited arguments {json.dumps(run_args)}" if edited else ""
                if outcome.result == "unknown":
                    note = (
                        f"Operator {operator} approved the call of {tool}{why}{where}{how}, but "
                        f"its outcome is UNKNOWN: {outcome.content}"
                    )
                else:
                    note = (
                        f"Operator {operator} APPROVED the call of {tool}{why}{where}{how}; it "
                        f"ran once and answered:\n{outcome.content}"
                    )
            decisions.append(
                operator_decision_record(
                    operator=operator,
                    reason=reason,
                    action=action,
                    gate=self.gate,
                    decision_id=None,
                    override_flag=None,
                    result=result,
                    outcome=outcome_dump,
                    tool_call_id=call_id,
                    escalation_id=escalation_id_of(denial),
                    answered_in_thread=elsewhere,
                    verdict=verdict,
                    roles=roles,
                    digest=decided.get("digest"),
                    interrupt_id=decided.get("interrupt_id"),
                    asked_at=decided.get("asked_at") or denial.get("raised_at"),
                    decided_at=claim.answer.get("decided_at"),
                    expires_at=decided.get("expires_at"),
                    original_args=held_args if edited is not None else None,
                    edited_args=edited if edited is not None else None,
                    tool=tool,
                    args_digest=str(digest) if digest else None,
                )
            )
            original = by_call.get(call_id or "")
            if original is not None:
                messages.append(
                    tool_message(
                        note,
                        name=str(original.name or denial.get("catalog_name") or ""),
                        tool_call_id=original.tool_call_id,
                        msg_id=original.id,
                        outcome=original.response_metadata.get(OUTCOME_KEY, "ok"),
                        status="success" if success else "error",
                    )
                )
        return {
            "messages": messages,
            "receipts": [],
            "denials": [],
            "operator_decisions": decisions,
            "tool_calls": ran,
        }


def _policy_of(denial: Mapping[str, Any]) -> str:
    recorded = denial.get("policy")
    if recorded in POLICIES:
        return str(recorded)
    gate = GATES.get(str(denial.get("gate")))
    return gate.default_policy if gate is not None else "halt"


def _number(value: Any) -> float | None:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


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
