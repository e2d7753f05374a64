"""The per-gate denial handlers and the operator path.

One implementation, instantiated per gate (:class:`DenialHandler`), so each gate has its own
node and its own labelled edge. A step's denials are handled strictest policy first
(``docs/ARCHITECTURE.md``, invariant 7): the conditional edge after ``governed_tool`` enters the
handler of the strictest gate, and each handler passes the step on to the next gate's handler,
then to the model. Every denial carries the policy it was raised under, so a resume never
depends on the resuming caller's settings:

- ``halt``: the run ends (a step with any halting denial halts; no operator is asked);
- ``report``: nothing to do (the model was already told which gate blocked which call);
- ``escalate``: one ``interrupt()`` per gate listing that gate's pending denials, in LangChain's
  human-in-the-loop shape (:class:`EscalationRequest`: ``action_requests`` and
  ``review_configs``, plus Algenta's fields). Resume with LangChain's decisions::

      Command(resume={"decisions": [{"type": "approve", "message": "why"}],
                      "operator": "ana"})

  (``approve`` overrides, ``reject`` declines; one decision per action request, in order) or
  with the short form, applied to every request::

      Command(resume={"action": "override" | "decline", "operator": "ana", "reason": "why"})

  A malformed answer interrupts again with an ``error`` and does nothing. A valid answer is
  **claimed** (:mod:`algenta_graph.claims`) before any side effect, so when two operators answer
  at once exactly one answer takes effect; the other resume raises
  :class:`~algenta_graph.claims.EscalationAlreadyDecided`. An override re-executes on the
  operator path (the gate's ``override_flag``), never through a model-facing tool, tagged with
  the operator's identity; the receipt (or the engine's new denial) and an
  :class:`~algenta_graph.state.OperatorDecision` are recorded in the operator's name, and the
  model is told.

When a node resumes, LangGraph replays the earlier answers to its interrupts in order, and each
is validated again under the *current* caller; the served graph therefore stamps every resume
with the authenticated identity (:mod:`algenta_graph.auth`), so an answer refused for one
operator can never take effect in another's name.

Who the operator is: the authenticated identity when the graph is served with auth
(``config["configurable"]["langgraph_auth_user"]``; a payload ``operator`` may not contradict
it), otherwise the payload's ``operator``. ``authorize_operator(identity, gate, config)`` (an
argument of :func:`~algenta_graph.graph.create_governed_agent`) may refuse anyone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from langchain.agents.middleware.human_in_the_loop import ActionRequest, ReviewConfig
from langchain_core.messages import BaseMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END
from langgraph.types import Command, interrupt
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator
from typing_extensions import NotRequired, TypedDict

from algenta_graph.catalog import EXECUTE_TOOL, validation_problems
from algenta_graph.chain import seal
from algenta_graph.claims import (
    HEARTBEAT_SECONDS,
    Claim,
    ClaimStore,
    EscalationAlreadyDecided,
    claims_for,
    escalation_key,
    new_claim,
    release,
)
from algenta_graph.errors import AlgentaGraphError
from algenta_graph.gates import GATES, OVERRIDE_FLAGS, POLICIES
from algenta_graph.governed_tool import (
    OUTCOME_KEY,
    GovernedToolNode,
    dump,
    for_decision,
    gate_order,
    last_step,
    message_text,
    receipt_text,
    settle_for,
    step_denials,
    tool_message,
)
from algenta_graph.outcomes import (
    ExecutionDenial,
    ExecutionFailure,
    ExecutionOutcome,
    ExecutionReceipt,
)
from algenta_graph.state import GovernedState, OperatorDecision, escalation_id_of

__all__ = [
    "MODEL_NODE",
    "UNFINISHED_STEP",
    "AuthorizeOperator",
    "DenialHandler",
    "EscalationItem",
    "EscalationRequest",
    "OperatorAnswer",
    "handler_node_name",
    "parse_resume",
    "pending_escalations",
    "route_pending_escalation",
]

logger = logging.getLogger(__name__)

MODEL_NODE = "model"
AuthorizeOperator = Callable[[str, str, RunnableConfig], bool]
"""``(operator identity, gate, config) -> allowed``: an app's own rule for who may answer."""


def handler_node_name(gate: str) -> str:
    """The node that applies the policy for ``gate``: ``denial_handler_<gate>``."""
    return f"denial_handler_{gate}"


class EscalationItem(TypedDict):
    """Algenta's fields of one escalated denial."""

    gate: str
    code: str | None
    message: str | None
    override_hint: str | None
    decision_id: str | None
    webhook_url: str | None
    override_flag: str
    tool_call_id: str | None
    escalation_id: str


class EscalationRequest(EscalationItem):
    """The ``interrupt()`` value: LangChain's ``HITLRequest`` plus Algenta's fields.

    ``action_requests[i]``/``review_configs[i]`` and ``escalations[i]`` describe the same
    denial; the top-level ``gate``, ``decision_id``, ... (the :class:`EscalationItem` fields)
    repeat ``escalations[0]`` for clients that show one denial at a time.
    """

    action_requests: list[ActionRequest]
    review_configs: list[ReviewConfig]
    escalations: list[EscalationItem]
    resume_with: dict[str, Any]
    error: NotRequired[str]


class _ShortResume(BaseModel):
    model_config = ConfigDict(extra="forbid")

    action: Literal["override", "decline"]
    operator: str
    reason: str

    @field_validator("operator", "reason")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value.strip()


class _Decision(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["approve", "reject"]
    message: str | None = None


class _DecisionsResume(BaseModel):
    model_config = ConfigDict(extra="forbid")

    decisions: list[_Decision]
    operator: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class OperatorAnswer:
    """A validated resume: who answered, and per escalated denial ``(action, reason)``."""

    operator: str | None
    decisions: tuple[tuple[Literal["override", "decline"], str], ...]

    def as_claim(self, operator: str, thread_id: Any = None) -> dict[str, Any]:
        claim: dict[str, Any] = {
            "operator": operator,
            "decisions": [{"action": a, "reason": r} for a, r in self.decisions],
        }
        if thread_id:
            claim["thread_id"] = str(thread_id)
        return claim


def parse_resume(raw: Any, count: int) -> OperatorAnswer:
    """Validate a resume for ``count`` escalated denials; ``ValueError`` says what is wrong."""
    if isinstance(raw, Mapping) and "decisions" in raw:
        try:
            hitl = _DecisionsResume.model_validate(raw)
        except ValidationError as exc:
            raise ValueError(validation_problems(exc)) from None
        if len(hitl.decisions) != count:
            raise ValueError(
                f"decisions: {len(hitl.decisions)} given for {count} action request(s); "
                "answer each one, in order"
            )
        out: list[tuple[Literal["override", "decline"], str]] = []
        for d in hitl.decisions:
            reason = (d.message or hitl.reason or "").strip()
            if not reason:
                raise ValueError("a reason is required: each decision's message, or 'reason'")
            out.append(("override" if d.type == "approve" else "decline", reason))
        operator = hitl.operator.strip() if hitl.operator and hitl.operator.strip() else None
        return OperatorAnswer(operator, tuple(out))
    try:
        short = _ShortResume.model_validate(raw)
    except ValidationError as exc:
        raise ValueError(validation_problems(exc)) from None
    return OperatorAnswer(short.operator, ((short.action, short.reason),) * count)


def authenticated_identity(config: RunnableConfig | None) -> str | None:
    """The identity LangGraph's auth put on this run, if the graph is served with auth."""
    user = ((config or {}).get("configurable") or {}).get("langgraph_auth_user")
    if user is None:
        return None
    identity = (
        user.get("identity") if isinstance(user, Mapping) else getattr(user, "identity", None)
    )
    authenticated = (
        user.get("is_authenticated", True)
        if isinstance(user, Mapping)
        else getattr(user, "is_authenticated", True)
    )
    return str(identity) if identity and authenticated else None


def pending_escalations(state: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The latest step's escalated denials that no operator has answered yet."""
    answered = {d.get("tool_call_id") for d in state.get("operator_decisions") or []}
    return [
        dict(d)
        for d in step_denials(state)
        if d.get("policy") == "escalate" and d.get("tool_call_id") not in answered
    ]


UNFINISHED_STEP = "unfinished step"
"""The route of a new turn whose thread has a governed step that never finished."""


def route_pending_escalation(state: Mapping[str, Any]) -> str:
    """Where a new turn goes after retrieval, so that no run passes unfinished governance:

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


def _item(gate: str, denial: Mapping[str, Any]) -> EscalationItem:
    return EscalationItem(
        gate=gate,
        code=denial.get("code"),
        message=denial.get("message"),
        override_hint=denial.get("override_hint"),
        decision_id=denial.get("decision_id"),
        webhook_url=denial.get("webhook_url"),
        override_flag=OVERRIDE_FLAGS[gate],
        tool_call_id=denial.get("tool_call_id"),
        escalation_id=escalation_id_of(denial),
    )


def escalation_request(gate: str, denials: Sequence[Mapping[str, Any]]) -> EscalationRequest:
    """The interrupt value asking an operator about ``denials`` (all of one gate)."""
    items = [_item(gate, d) for d in denials]
    flag = OVERRIDE_FLAGS[gate]
    requests = [
        ActionRequest(
            name=EXECUTE_TOOL,
            args={"decision_id": i["decision_id"], "webhook_url": i["webhook_url"], flag: True},
            description=(
                f"The {gate} gate denied decision {i['decision_id']} ({i['code']}): "
                f"{i['message']}. Approve to execute it anyway with {flag}=true; reject to keep "
                "it blocked."
            ),
        )
        for i in items
    ]
    return EscalationRequest(
        action_requests=requests,
        review_configs=[
            ReviewConfig(  # type: ignore[typeddict-item]
                action_name=EXECUTE_TOOL, allowed_decisions=["approve", "reject"]
            )
        ],
        escalations=items,
        **items[0],
        resume_with={
            "decisions": [{"type": "approve | reject", "message": "why"}] * len(items),
            "operator": "who decides (the authenticated identity when served with auth)",
        },
    )


class DenialHandler:
    """The denial handler node of one gate (see the module docs)."""

    def __init__(
        self,
        gate: str,
        tools: GovernedToolNode,
        *,
        authorize_operator: AuthorizeOperator | None = None,
    ) -> None:
        self.gate = gate
        self.tools = tools
        self.authorize_operator = authorize_operator
        self.__name__ = handler_node_name(gate)

    def _next(self, order: Sequence[str]) -> str:
        later = list(order[order.index(self.gate) + 1 :]) if self.gate in order else []
        later = [g for g in later if g in GATES]
        return handler_node_name(later[0]) if later else MODEL_NODE

    async def __call__(self, state: GovernedState, config: RunnableConfig) -> Command[Any]:
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
        store = claims_for(_checkpointer(config))
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
        receipts: list[dict[str, Any]] = []
        denials: list[dict[str, Any]] = []
        decisions: list[dict[str, Any]] = []
        messages: list[ToolMessage] = []
        flag = OVERRIDE_FLAGS[self.gate]
        for denial, decided in zip(pending, claim.answer["decisions"], strict=True):
            action, reason = decided["action"], decided["reason"]
            call_id = denial.get("tool_call_id")
            escalation_id = escalation_id_of(denial)
            decision_id = denial.get("decision_id")
            outcome_dump: dict[str, Any] | None = None
            if action == "decline":
                result = "declined"
                note = (
                    f"Operator {operator} reviewed the {self.gate} denial and DECLINED to "
                    f"override it ({reason}){where}. Decision {decision_id} was not executed."
                )
            else:
                outcome = await self._override(
                    denial,
                    operator,
                    reason,
                    flag,
                    str(thread_id) if thread_id else None,
                    state.get("messages", []),
                    answered_in=elsewhere,
                )
                outcome_dump = dump(outcome)
                if isinstance(outcome, ExecutionReceipt):
                    result = "receipt" if outcome.execution_status == "delivered" else "failed"
                    receipts.append(
                        {
                            **outcome_dump,
                            "tool_call_id": call_id,
                            "source": "operator",
                            "operator": operator,
                        }
                    )
                    note = (
                        f"Operator {operator} OVERRODE the {self.gate} gate ({reason}){where} "
                        f"with {flag}. " + receipt_text(outcome)
                    )
                elif isinstance(outcome, ExecutionDenial):
                    result = "denied"
                    denials.append(
                        {
                            **outcome_dump,
                            "decision_id": decision_id,
                            "webhook_url": denial.get("webhook_url"),
                            "tool_call_id": call_id,
                            "source": "operator",
                        }
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
                OperatorDecision(
                    operator=operator,
                    reason=reason,
                    action=action,
                    gate=self.gate,
                    decision_id=decision_id,
                    override_flag=flag,
                    result=result,  # type: ignore[arg-type]
                    outcome=outcome_dump,
                    tool_call_id=call_id,
                    escalation_id=escalation_id,
                    answered_in_thread=elsewhere,
                ).model_dump(mode="json")
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

    async def _override(
        self,
        denial: Mapping[str, Any],
        operator: str,
        reason: str,
        flag: str,
        thread_id: str | None,
        messages: Sequence[BaseMessage] = (),
        *,
        answered_in: str | None = None,
    ) -> ExecutionOutcome:
        decision_id = denial.get("decision_id")
        webhook_url = denial.get("webhook_url")
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

        settle = settle_for(denial)
        previous = await self.tools.find_execution(decision_id, ours, settle=settle)
        if previous is not None:
            return previous[0]
        timeout = denial.get("timeout_seconds")
        try:
            supplied = await self.tools.graph_supplied(
                decision_id, f"escalation:{escalation_id}", messages
            )
            outcome = await self.tools.conn.execute_as_operator(
                decision_id,
                webhook_url,
                force=flag == "force",
                override_safety=flag == "override_safety",
                timeout_seconds=timeout if isinstance(timeout, int | float) else None,
                metadata={
                    "algenta_graph": {
                        "thread_id": answered_in or thread_id,
                        "tool_call_id": call_id,
                        "operator": operator,
                        "reason": reason,
                        "escalation_id": escalation_id,
                    }
                },
                extra=supplied,
            )
        except AlgentaGraphError as exc:
            return ExecutionFailure(message=f"operator execution failed: {exc}")
        if isinstance(outcome, ExecutionDenial) and outcome.gate == "idempotency":
            # our own override was still in flight when we looked above (a resumed process
            # races the crashed one's delivery); the engine serialised us behind it
            delivered = await self.tools.find_execution(decision_id, ours, settle=settle)
            if delivered is not None:
                return delivered[0]
        return for_decision(outcome, decision_id)


async def _keep_alive(store: ClaimStore, claim: Claim) -> None:
    """Refresh ``claim`` every :data:`~algenta_graph.claims.HEARTBEAT_SECONDS` until cancelled."""
    while True:
        await asyncio.sleep(HEARTBEAT_SECONDS)
        try:
            await store.refresh(claim)
        except Exception as exc:  # a missed refresh only shortens the lease; never fatal
            logger.warning("escalation claim %s: refresh failed: %s", claim.key, exc)


def _checkpointer(config: RunnableConfig) -> Any:
    from langgraph._internal._constants import CONFIG_KEY_CHECKPOINTER

    return (config.get("configurable") or {}).get(CONFIG_KEY_CHECKPOINTER)
