"""What an operator is asked about an escalation, and what an answer may be.

The ``interrupt()`` value of a denial handler is an :class:`EscalationRequest`: LangChain's
human-in-the-loop ``HITLRequest`` (``action_requests`` and ``review_configs``) plus Algenta's
fields (one :class:`EscalationItem` per escalated denial). Resume with LangChain's decisions::

    Command(resume={"decisions": [{"type": "approve", "message": "why"}], "operator": "ana"})

(``approve`` overrides, ``reject`` declines; one decision per action request, in order) or with
the short form, applied to every request::

    Command(resume={"action": "override" | "decline", "operator": "ana", "reason": "why"})

:func:`parse_resume` validates an answer (``ValueError`` says what is wrong); who the operator
is comes from the authenticated identity when served with auth (:func:`authenticated_identity`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from langchain.agents.middleware.human_in_the_loop import ActionRequest, ReviewConfig
from langchain_core.runnables import RunnableConfig
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator
from typing_extensions import NotRequired, TypedDict

from algenta_graph.connection.engine import EXECUTE_TOOL
from algenta_graph.governance.gates import OVERRIDE_FLAGS
from algenta_graph.nodes.steps import step_denials
from algenta_graph.retrieval.catalog import validation_problems
from algenta_graph.state import OperatorAction, escalation_id_of

__all__ = [
    "AuthorizeOperator",
    "EscalationItem",
    "EscalationRequest",
    "OperatorAnswer",
    "authenticated_identity",
    "escalation_request",
    "parse_resume",
    "pending_escalations",
]

AuthorizeOperator = Callable[[str, str, RunnableConfig], bool]
"""``(operator identity, gate, config) -> allowed``: an app's own rule for who may answer."""


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

    action: OperatorAction
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
    decisions: tuple[tuple[OperatorAction, str], ...]

    def as_claim(self, operator: str, thread_id: Any = None) -> dict[str, Any]:
        """The answer as its claim stores it (:func:`~algenta_graph.governance.claims.new_claim`).

        ``operator`` (who answered), ``decisions`` (each an ``action`` and a ``reason``) and,
        when given, ``thread_id`` (the thread the answer was given in).
        """
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
        out: list[tuple[OperatorAction, str]] = []
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
    first = items[0]
    # ``cast``, not the constructor: langchain marks ``args_schema`` ``typing.NotRequired``, which
    # mypy's Python 3.10 target does not know, so it reads the key as required
    review = cast(
        ReviewConfig, {"action_name": EXECUTE_TOOL, "allowed_decisions": ["approve", "reject"]}
    )
    return EscalationRequest(
        action_requests=requests,
        review_configs=[review],
        escalations=items,
        # the EscalationItem fields, repeating escalations[0]
        gate=first["gate"],
        code=first["code"],
        message=first["message"],
        override_hint=first["override_hint"],
        decision_id=first["decision_id"],
        webhook_url=first["webhook_url"],
        override_flag=first["override_flag"],
        tool_call_id=first["tool_call_id"],
        escalation_id=first["escalation_id"],
        resume_with={
            "decisions": [{"type": "approve | reject", "message": "why"}] * len(items),
            "operator": "who decides (the authenticated identity when served with auth)",
        },
    )
