"""The per-gate denial handler nodes: each applies its gate's policy to a step's denials.

One implementation, instantiated per gate (:class:`DenialHandler`), so each gate has its own
node and its own labelled edge. A step's denials are handled strictest policy first
(``docs/ARCHITECTURE.md``, invariant 7): the conditional edge after ``governed_tool`` enters the
handler of the strictest gate, and each handler passes the step on to the next gate's handler,
then to the model. Every denial carries the policy it was raised under, so a resume never
depends on the resuming caller's settings:

- ``halt``: the run ends (a step with any halting denial halts; no operator is asked);
- ``report``: nothing to do (the model was already told which gate blocked which call);
- ``escalate``: the operator is asked (:mod:`algenta_graph.nodes.questions`: what is asked;
  :mod:`algenta_graph.nodes.answers`: what an answer may be): one ``interrupt()`` per gate
  listing its pending denials (``batched``), or one per escalated call (``per_call``), each with
  a ``response_schema``, so LangGraph refuses a bad answer before it is saved and nothing is ever
  silently asked again.

Before it asks, the handler notifies (:mod:`algenta_graph.governance.notifications`: once per
escalation, whatever process runs it) and, when served, records in the thread's metadata that
the thread waits on its gate (:mod:`algenta_graph.governance.visibility`).

A valid answer is **claimed** under the escalation's own identity, in the graph's ledger
(:mod:`algenta_graph.ledger`, invariants 12 and 17) before any side effect: exactly one answer
takes effect, whichever thread (a copy), task (after a cancel) or process gives it; an answer
given elsewhere is completed here in its operator's name, never asked again, and a resume whose
own answer lost to it is told so once the run ends (the run's
:class:`~algenta_graph.nodes.claiming.AnswerReport`); one being applied by a live claimant raises
:class:`~algenta_graph.errors.EscalationAlreadyDecided`. An answer that arrives after the
escalation's deadline declines it (``expired``), whatever it says.
The claim's side is :mod:`algenta_graph.nodes.claiming`; who the operator is,
:mod:`algenta_graph.nodes.operators`. The answer is applied by :mod:`algenta_graph.nodes.applying`:
an approval (or an edit, sent with the edited arguments) re-executes on the operator path (the
executor's :meth:`~algenta_graph.nodes.executor.DecisionExecutor.override`), tagged with the
operator's identity, or runs a held call once; a ``respond`` gives the model the operator's text
and executes nothing. The receipt, the engine's new denial (routed through its own gate's
policy, like any other) and an operator decision saying who, with which roles, what they were
shown, when asked, when decided and the outcome (invariant 15) are recorded, and the model is
told.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timezone
from functools import partial
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END
from langgraph.types import Command, interrupt

from algenta_graph._langgraph import answers_saved, checkpointer_of, interrupt_id
from algenta_graph.audit.chain import seal
from algenta_graph.connection.outcomes import tool_result_json
from algenta_graph.governance.escalations import EscalationSettings, deadline, is_overdue
from algenta_graph.governance.gates import (
    DEFAULT_POLICIES,
    ENGINE_GATE_NAMES,
    GATES,
    POLICIES,
    Policy,
    parse_on_denial,
)
from algenta_graph.governance.notifications import notify_once
from algenta_graph.governance.run_settings import resolve_run_settings
from algenta_graph.governance.tool_gates import CompiledGates
from algenta_graph.governance.visibility import MetadataWriter, set_waiting
from algenta_graph.ledger import ApprovalMark, ClaimAnswer, Ledger, escalation_key, run_ledger
from algenta_graph.nodes.answers import (
    OperatorAnswer,
    answer_schema,
    check_quorum,
    check_rules,
)
from algenta_graph.nodes.applying import apply_held, apply_override
from algenta_graph.nodes.claiming import (
    adopt,
    apply_claimed,
    claim_answer,
    report_lost,
    run_id_of,
)
from algenta_graph.nodes.executor import DecisionExecutor
from algenta_graph.nodes.operators import AuthorizeOperator, answering_operator, authenticated_roles
from algenta_graph.nodes.questions import (
    EscalationItem,
    escalation_items,
    escalation_request,
    is_answered,
    open_denials,
    pending_escalations,
    quorum_of,
    request_digest,
    tool_approval,
)
from algenta_graph.nodes.quorum import approvals, approvers, count_approval
from algenta_graph.nodes.steps import gate_order, last_step, step_denials
from algenta_graph.records import PolicyName, escalation_id_of
from algenta_graph.state import GovernedState

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
            (:data:`~algenta_graph.nodes.operators.AuthorizeOperator`); an answer of an operator
            it refuses is refused (nothing is saved or done).
        settings: how operators are asked and what an answer may be
            (:class:`~algenta_graph.governance.escalations.EscalationSettings`; the defaults
            without it).
        policies: the graph's denial policy per gate (default: the gate table's); a new denial
            the operator path meets is routed under it, tightened by the run's.
        clock: the current time (UTC), for deadlines; ``datetime.now`` by default.
        thread_metadata: the writer of thread metadata (default: the LangGraph server's own,
            when served; none otherwise).
        tool_gates: the graph-side gates' rules: every approval and edit of a held call must
            keep the argument rules in force (:func:`~algenta_graph.nodes.answers.check_rules`;
            default: none checked).
        ledger: the graph's ledger, where answers are claimed, notices marked and held calls
            written ahead (:mod:`algenta_graph.ledger`; every process serving the graph must
            share it). Default: chosen at run time by :func:`~algenta_graph.ledger.run_ledger`
            (this process's own under no checkpointer or an ``InMemorySaver``, else the run is
            refused); :func:`~algenta_graph.graph.create_governed_agent` gives every node the
            one it chose.
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
        ledger: Ledger | None = None,
    ) -> None:
        self.gate = gate
        self.ledger: Ledger | None = ledger
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
        # a run no shared ledger guards is refused before it asks anyone (fails closed)
        ledger = self.ledger if self.ledger is not None else run_ledger(checkpointer_of(config))
        ids = [escalation_id_of(d) for d in pending]
        key = escalation_key(ids)
        thread_id = (config.get("configurable") or {}).get("thread_id")
        thread = str(thread_id) if thread_id else None
        # 0. an escalation answered before -- in a copy of this thread or its original, by a run
        #    that was cancelled or died, in another process, expired by the command -- is never
        #    asked again: that answer is completed here, in its operator's name (invariant 12)
        earlier = await ledger.get(key, ClaimAnswer)
        if earlier is not None:
            claim = await adopt(ledger, earlier)
            lost = True  # a resume carrying another answer is told, once this one is applied
        else:
            items = await self._items(pending, thread, config)
            # 1. tell who must answer (once per escalation) and who may see it; both are safe to
            #    repeat, as the node runs again from its start when it is resumed
            await self._announce(ledger, items, thread)
            # 2. the interrupt: no side effect may precede it; the answer arrives validated
            #    (under a quorum, asked again until enough distinct operators approved)
            answer, approvers = await self._gather(ledger, key, pending, items, thread, config)
            now = self.clock()
            expired = [is_overdue(i["expires_at"], now) for i in items]
            operator = answer.operator or "?"
            # 3. exactly one answer takes effect: claim it before any side effect
            given = answer.as_claim(
                operator,
                items=items,
                thread_id=thread,
                roles=authenticated_roles(config),
                decided_at=now.isoformat(),
                expired=expired,
            )
            given["run_id"] = run_id_of(config)
            given["approvers"] = approvers
            claim, mine = await claim_answer(ledger, key, ClaimAnswer.model_validate(given))
            lost = not mine  # another answer was claimed first: it takes effect, this is told
        # 4. side effects, in the name of the claim's operator, the claim kept alive meanwhile
        #    (:mod:`algenta_graph.nodes.applying`)
        apply: Callable[[], Awaitable[dict[str, Any]]]
        if GATES[self.gate].side == "graph":
            apply = partial(
                apply_held,
                self.executor,
                self.gate,
                ledger,
                claim,
                pending,
                state,
                config,
                self.tool_gates,
            )
        else:
            policy_for = partial(self._policy_for, config=config)
            apply = partial(
                apply_override, self.executor, self.gate, claim, pending, state, config, policy_for
            )
        update = await apply_claimed(ledger, claim, apply)
        if lost:
            report_lost(config, ids, claim.finished())
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
        self,
        pending: Sequence[Mapping[str, Any]],
        thread: str | None,
        config: RunnableConfig,
        asked: int = 0,
    ) -> list[EscalationItem]:
        """What is shown about ``pending``, asked after ``asked`` interrupts of this node."""
        snapshot = await self._policy_snapshot(pending)
        per_call = self.settings.interrupt_mode == "per_call"
        ids = [interrupt_id(config, asked + (i if per_call else 0)) for i in range(len(pending))]
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
        self, ledger: Ledger, items: Sequence[EscalationItem], thread: str | None
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
            await notify_once(ledger, self.settings, notice)
        await set_waiting(thread, [self.gate], write=self.thread_metadata)

    async def _gather(
        self,
        ledger: Ledger,
        key: str,
        pending: Sequence[Mapping[str, Any]],
        items: list[EscalationItem],
        thread: str | None,
        config: RunnableConfig,
    ) -> tuple[OperatorAnswer, list[str]]:
        """The answer that takes effect, and who had approved under a quorum.

        Without a quorum, the one answer. Under one, each approval is counted in the ledger
        (:func:`~algenta_graph.nodes.quorum.count_approval`) and the escalation asked again,
        saying who approved, until the quorum's last; a reject or respond ends it at once, and so
        does an approval given past the deadline (declined ``expired``, not counted). The
        quorum is the gate's or a reviewed tool's (:func:`~algenta_graph.nodes.questions.
        quorum_of`). A resumed node replays the answers given before (LangGraph's resume values,
        in order), each counted again idempotently; an approval given now whose operator's is
        already counted (in the ledger: another worker, thread copy or token) is refused by name.
        """
        quorum = quorum_of(self.gate, items, self.settings)
        if quorum == 1:
            return self._ask(items, config), []
        digest = request_digest(items)
        counted = await approvals(ledger, key, digest, quorum)
        given: list[str] = []  # who approved in the answers this node run has met so far
        saved = answers_saved(config)  # None (unknown): every answer taken as replayed
        per_round = len(items) if self.settings.interrupt_mode == "per_call" else 1
        while True:
            replayed = saved is None or (len(given) + 1) * per_round <= saved
            shown = [
                EscalationItem(**i, quorum=quorum, approvals=approvers(counted)) for i in items
            ]
            # an answer given now is refused by name if its operator's approval is counted
            before = given if replayed else list(dict.fromkeys([*approvers(counted), *given]))
            answer = self._ask(shown, config, before, quorum, replayed=replayed)
            now = self.clock()
            late = not replayed and any(is_overdue(i["expires_at"], now) for i in items)
            if not answer.approves_all or late:  # past the deadline: declined, not counted
                return answer, approvers(counted)
            mark = ApprovalMark(
                operator=answer.operator or "?",
                digest=digest,
                roles=authenticated_roles(config),
                decided_at=self.clock().isoformat(),
                thread_id=thread,
                reason=answer.decisions[0].reason,
            )
            counted = await count_approval(ledger, key, quorum, mark, replayed=replayed)
            given.append(mark.operator)
            if len(counted) >= quorum:
                return answer, approvers(counted)
            items = await self._items(pending, thread, config, asked=len(given) * per_round)

    def _ask(
        self,
        items: Sequence[EscalationItem],
        config: RunnableConfig,
        approved: Sequence[str] = (),
        quorum: int = 1,
        *,
        replayed: bool = False,
    ) -> OperatorAnswer:
        """Interrupt for the operator's answer, checked by LangGraph before it is saved.

        ``approved``: who approved before, under a ``quorum`` (an answer that approves again in
        their name is refused). ``replayed``: the answer is one given in an earlier run (under
        a quorum, another operator's approval), whose operator was checked and stamped on it
        then: it is not checked against this run's identity.
        """
        if self.settings.interrupt_mode != "per_call":

            def check(answer: OperatorAnswer) -> OperatorAnswer:
                self._check_edits(answer, items)
                who = self._operator(answer, config, replayed)
                named = dataclasses.replace(answer, operator=who)
                check_quorum(named, approved, quorum)
                return named

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
                operator = self._operator(answer, config, replayed)
                if first is not None and operator != first:
                    raise ValueError(
                        f"call {index + 1} of this step: operator {operator!r} is not {first!r}, "
                        "who answered its first call; one operator answers all the calls of a "
                        "step"
                    )
                self._check_edits(answer, [items[index]])
                named = dataclasses.replace(answer, operator=operator)
                so_far = OperatorAnswer(operator, (*decided, *answer.decisions))
                check_quorum(so_far, approved, quorum)
                return named

            schema = answer_schema([item], self.settings, per_call=True, check=check_one)
            one: OperatorAnswer = interrupt(tool_approval(item), response_schema=schema).root
            first = first or one.operator
            decided.extend(one.decisions)
        return OperatorAnswer(first, tuple(decided), tuple(i["digest"] for i in items))

    def _check_edits(self, answer: OperatorAnswer, items: Sequence[EscalationItem]) -> None:
        """Refuse an approval or edit that breaks an argument rule in force (``check_rules``)."""
        check_rules(answer, items, self.tool_gates)

    def _operator(self, answer: OperatorAnswer, config: RunnableConfig, replayed: bool) -> str:
        """Who gave ``answer``: as stamped on it when it was given, for a replayed one."""
        if replayed and answer.operator:
            return answer.operator
        return answering_operator(answer.operator, self.gate, config, self.authorize_operator)

    # ------------------------------------------------------------------ one answer

    def _policy_for(self, gate: str, config: RunnableConfig) -> PolicyName:
        """The policy a new denial of ``gate`` is raised under: the graph's, tightened."""
        policies = resolve_run_settings(config, None, top_k=1, policies=self.policies).policies
        return policies.get(gate, "halt") if gate in ENGINE_GATE_NAMES else "halt"


def _policy_of(denial: Mapping[str, Any]) -> str:
    recorded = denial.get("policy")
    if recorded in POLICIES:
        return str(recorded)
    gate = GATES.get(str(denial.get("gate")))
    return gate.default_policy if gate is not None else "halt"
