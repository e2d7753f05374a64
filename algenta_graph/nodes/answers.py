"""What an operator is asked about an escalation, and what an answer may be.

**The question.** In the default ``batched`` mode the ``interrupt()`` value of a denial handler is
an :class:`EscalationRequest`: LangChain's human-in-the-loop ``HITLRequest`` (one
``action_requests[i]`` and one ``review_configs[i]`` per escalated call, the review config naming
the decisions that gate accepts) plus Algenta's fields (``escalations[i]``, an
:class:`EscalationItem`: the denial, the escalation's identity, the **digest** of what the
operator is shown, the interrupt id, when it was asked and its deadline). In ``per_call`` mode
each escalated call has an interrupt of its own, an :class:`EscalationApproval` (LangChain's
``ToolApprovalRequest``), answered with one decision.

**The answer.** Every interrupt carries a ``response_schema`` (:func:`answer_schema`), so
LangGraph checks an answer *before it is saved*: a malformed, stale, unauthorised or
contradictory answer is refused with a ``ValidationError`` naming what is wrong (the API client
shows it) and changes nothing; nothing is ever silently asked again. Accepted, as the ecosystem's
review clients send them:

- LangChain's decisions (Agent Chat UI, the middleware's clients), one per action request::

      {"decisions": [{"type": "approve"}]}
      {"decisions": [{"type": "reject", "message": "too risky"}]}
      {"decisions": [{"type": "edit", "edited_action": {"name": "execute_decision",
                                                      "args": {...}}}]}
      {"decisions": [{"type": "respond", "message": "text for the model"}]}

  (an optional ``message`` on any decision is recorded as the reason; ``operator``, ``reason``
  and ``digest`` may be given at the top level);
- Agent Inbox's list, one response per action request::

      [{"type": "accept" | "ignore" | "response" | "edit", "args": ...}]

- the short form, applied to every request: ``{"action": "override" | "decline", "operator",
  "reason"}``;
- in ``per_call`` mode, one decision (``{"type": "approve"}``), the short form or Agent Inbox's
  list of one.

Any answer may carry the ``digest`` it was given for (per decision, or at the top level for the
whole request): an answer for anything but the pending escalation is refused as **stale**. Who
the operator is comes from the authenticated identity when served with auth
(:func:`authenticated_identity`), else from the answer's ``operator``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Union, cast

from langchain.agents.middleware.human_in_the_loop import (
    ActionRequest,
    ReviewConfig,
    ToolApprovalRequest,
)
from langchain_core.runnables import RunnableConfig
from pydantic import (
    AfterValidator,
    ConfigDict,
    Discriminator,
    Field,
    RootModel,
    StringConstraints,
    Tag,
)
from typing_extensions import NotRequired, TypedDict

from algenta_graph.connection.engine import EXECUTE_TOOL
from algenta_graph.governance.escalations import (
    DecisionType,
    EscalationSettings,
    escalation_digest,
)
from algenta_graph.governance.gates import GATES, OVERRIDE_FLAGS
from algenta_graph.governance.scrub import GRAPH_SUPPLIED_FIELDS, scrub_arguments
from algenta_graph.nodes.executor import bad_arguments
from algenta_graph.nodes.steps import step_denials
from algenta_graph.state import OperatorAction, OperatorVerdict, escalation_id_of

__all__ = [
    "EDITABLE_ARGUMENTS",
    "AuthorizeOperator",
    "Decided",
    "EscalationApproval",
    "EscalationItem",
    "EscalationRequest",
    "OperatorAnswer",
    "answer_schema",
    "authenticated_identity",
    "authenticated_roles",
    "edited_arguments",
    "edited_call_arguments",
    "escalation_items",
    "escalation_request",
    "is_answered",
    "open_denials",
    "pending_escalations",
    "request_digest",
    "reviewed_args",
    "tool_approval",
]

AuthorizeOperator = Callable[[str, str, RunnableConfig], bool]
"""``(operator identity, gate, config) -> allowed``: an app's own rule for who may answer."""

EDITABLE_ARGUMENTS: tuple[str, ...] = ("webhook_url", "timeout_seconds", "metadata")
"""What an ``edit`` may change in an escalated ``execute_decision`` call (``decision_id`` may be
sent back unchanged: an approval is bound to the decision reviewed)."""


# --------------------------------------------------------------------------- the question


class EscalationItem(TypedDict):
    """Algenta's fields of one escalated denial (what the operator is shown)."""

    gate: str
    """The gate that denied the call."""
    code: str | None
    """The engine's error code."""
    message: str | None
    """The engine's reason."""
    override_hint: str | None
    """The engine's hint on how the gate can be overridden."""
    decision_id: str | None
    """The decision the call would execute."""
    webhook_url: str | None
    """Where it would be delivered."""
    override_flag: str | None
    """The operator-path flag an approval sends (``force`` or ``override_safety``); ``None`` for
    a held call of a graph-side gate (an approval runs it as it is)."""
    action_name: NotRequired[str]
    """The reviewed call's tool (its catalog name; ``execute_decision`` for engine gates): an
    edit must name it."""
    tool: NotRequired[str]
    """A held call's tool, ``server.name`` (its real MCP name)."""
    args_digest: NotRequired[str]
    """A held call's arguments' digest."""
    tool_call_id: str | None
    """The escalated tool call."""
    escalation_id: str
    """The escalation's own identity (invariant 12)."""
    thread_id: str | None
    """The thread it was raised in."""
    args: dict[str, Any]
    """The reviewed call's arguments: what an approval executes (with the override flag)."""
    allowed_decisions: list[DecisionType]
    """The decisions this gate accepts (its review config's)."""
    policy_snapshot_id: str | None
    """The engine's policy snapshot when it was asked (``get_contract``), if the engine said."""
    digest: str
    """The digest of what is shown (:func:`~algenta_graph.governance.escalations.
    escalation_digest`): an answer that carries another one is refused as stale."""
    interrupt_id: str | None
    """The id of the interrupt that asks about it (answer ``{interrupt_id: answer}``)."""
    asked_at: str | None
    """When the escalation was raised (ISO 8601, UTC)."""
    expires_at: str | None
    """Its deadline (its gate's ``expires_after``), or ``None``: past it, any answer declines."""


class EscalationRequest(EscalationItem):
    """The ``batched`` interrupt value: LangChain's ``HITLRequest`` plus Algenta's fields.

    ``action_requests[i]``, ``review_configs[i]`` and ``escalations[i]`` describe the same
    denial; the top-level :class:`EscalationItem` fields repeat ``escalations[0]`` for clients
    that show one denial at a time, except ``digest``, which binds the whole request
    (:func:`request_digest`).
    """

    action_requests: list[ActionRequest]
    review_configs: list[ReviewConfig]
    escalations: list[EscalationItem]
    resume_with: dict[str, Any]


class EscalationApproval(ToolApprovalRequest):
    """The ``per_call`` interrupt value: LangChain's ``ToolApprovalRequest`` plus Algenta's.

    ``escalations`` holds the one :class:`EscalationItem` it asks about; ``gate``,
    ``escalation_id``, ``digest`` and ``expires_at`` repeat its fields.
    """

    escalations: list[EscalationItem]
    gate: str
    escalation_id: str
    digest: str
    expires_at: str | None


def is_answered(denial: Mapping[str, Any], decisions: Sequence[Mapping[str, Any]]) -> bool:
    """Whether an operator decision answers ``denial``.

    By the escalation's identity; a decision recorded before escalations had one answers the
    denial of its tool call.

    >>> is_answered({"escalation_id": "esc_1"}, [{"escalation_id": "esc_1"}])
    True
    >>> is_answered({"escalation_id": "esc_2", "tool_call_id": "c1"},
    ...             [{"escalation_id": "esc_1", "tool_call_id": "c1"}])
    False
    >>> is_answered({"tool_call_id": "c1"}, [{"escalation_id": None, "tool_call_id": "c1"}])
    True
    """
    escalation = escalation_id_of(denial)
    for decision in decisions:
        if decision.get("escalation_id"):
            if decision.get("escalation_id") == escalation:
                return True
        elif decision.get("tool_call_id") == denial.get("tool_call_id"):
            return True
    return False


def open_denials(state: Mapping[str, Any], gate: str) -> list[dict[str, Any]]:
    """The latest step's denials of ``gate`` that no operator decision answers."""
    decisions = state.get("operator_decisions") or []
    return [
        dict(d)
        for d in step_denials(state)
        if d.get("gate") == gate and not is_answered(d, decisions)
    ]


def pending_escalations(state: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The latest step's escalated denials that no operator has answered yet."""
    decisions = state.get("operator_decisions") or []
    return [
        dict(d)
        for d in step_denials(state)
        if d.get("policy") == "escalate" and not is_answered(d, decisions)
    ]


def reviewed_args(denial: Mapping[str, Any], flag: str) -> dict[str, Any]:
    """The arguments an approval of ``denial`` executes, as the operator is shown them.

    >>> reviewed_args({"decision_id": "d1", "webhook_url": "u", "timeout_seconds": 5}, "force")
    {'decision_id': 'd1', 'webhook_url': 'u', 'timeout_seconds': 5, 'force': True}
    """
    args: dict[str, Any] = {
        "decision_id": denial.get("decision_id"),
        "webhook_url": denial.get("webhook_url"),
    }
    if denial.get("timeout_seconds") is not None:
        args["timeout_seconds"] = denial["timeout_seconds"]
    args[flag] = True
    return args


def escalation_items(
    gate: str,
    denials: Sequence[Mapping[str, Any]],
    *,
    settings: EscalationSettings,
    thread_id: str | None,
    policy_snapshot_id: str | None,
    interrupt_ids: Sequence[str | None],
    expires: Callable[[Mapping[str, Any]], str | None],
) -> list[EscalationItem]:
    """What the operator is shown about each of ``denials`` (all of one gate)."""
    if GATES[gate].side == "graph":
        return _held_items(
            gate,
            denials,
            settings=settings,
            thread_id=thread_id,
            interrupt_ids=interrupt_ids,
            expires=expires,
        )
    flag = OVERRIDE_FLAGS[gate]
    items: list[EscalationItem] = []
    for denial, interrupt_id in zip(denials, interrupt_ids, strict=True):
        args = reviewed_args(denial, flag)
        allowed = settings.decisions_for(gate)
        if not isinstance(args["decision_id"], str) or not isinstance(args["webhook_url"], str):
            # nothing to execute: the call named no decision or target
            allowed = [d for d in allowed if d in ("reject", "respond")] or ["reject"]
        shown = {
            "thread_id": thread_id,
            "tool_call_id": denial.get("tool_call_id"),
            "gate": gate,
            "decision_id": denial.get("decision_id"),
            "args": args,
            "denial": {
                "code": denial.get("code"),
                "message": denial.get("message"),
                "override_hint": denial.get("override_hint"),
                "status_code": denial.get("status_code"),
                "escalation_id": escalation_id_of(denial),
            },
            "policy_snapshot_id": policy_snapshot_id,
        }
        items.append(
            EscalationItem(
                gate=gate,
                code=denial.get("code"),
                message=denial.get("message"),
                override_hint=denial.get("override_hint"),
                decision_id=denial.get("decision_id"),
                webhook_url=denial.get("webhook_url"),
                override_flag=flag,
                tool_call_id=denial.get("tool_call_id"),
                escalation_id=escalation_id_of(denial),
                thread_id=thread_id,
                args=args,
                allowed_decisions=list(allowed),
                policy_snapshot_id=policy_snapshot_id,
                digest=escalation_digest(shown),
                interrupt_id=interrupt_id,
                asked_at=denial.get("raised_at"),
                expires_at=expires(denial),
            )
        )
    return items


def _held_items(
    gate: str,
    denials: Sequence[Mapping[str, Any]],
    *,
    settings: EscalationSettings,
    thread_id: str | None,
    interrupt_ids: Sequence[str | None],
    expires: Callable[[Mapping[str, Any]], str | None],
) -> list[EscalationItem]:
    """What the operator is shown about held calls of a graph-side gate."""
    items: list[EscalationItem] = []
    for denial, interrupt_id in zip(denials, interrupt_ids, strict=True):
        args = dict(denial.get("args") or {})
        tool = f"{denial.get('server')}.{denial.get('tool')}"
        name = str(denial.get("catalog_name") or denial.get("tool"))
        shown = {
            "thread_id": thread_id,
            "tool_call_id": denial.get("tool_call_id"),
            "gate": gate,
            "tool": tool,
            "args": args,
            "args_digest": denial.get("args_digest"),
            "rule": denial.get("rule"),
            "denial": {
                "code": denial.get("code"),
                "message": denial.get("message"),
                "escalation_id": escalation_id_of(denial),
            },
        }
        item = EscalationItem(
            gate=gate,
            code=denial.get("code"),
            message=denial.get("message"),
            override_hint=None,
            decision_id=None,
            webhook_url=None,
            override_flag=None,
            tool_call_id=denial.get("tool_call_id"),
            escalation_id=escalation_id_of(denial),
            thread_id=thread_id,
            args=args,
            allowed_decisions=list(settings.decisions_for(gate)),
            policy_snapshot_id=None,
            digest=escalation_digest(shown),
            interrupt_id=interrupt_id,
            asked_at=denial.get("raised_at"),
            expires_at=expires(denial),
        )
        item["action_name"] = name
        item["tool"] = tool
        item["args_digest"] = str(denial.get("args_digest"))
        items.append(item)
    return items


def _action(item: EscalationItem) -> str:
    return item.get("action_name") or EXECUTE_TOOL


def request_digest(items: Sequence[EscalationItem]) -> str:
    """The digest of a whole request: its one item's, or a digest of every item's, in order."""
    if len(items) == 1:
        return items[0]["digest"]
    return escalation_digest({"args": [i["digest"] for i in items]})


def _description(item: EscalationItem) -> str:
    deadline = f" It expires at {item['expires_at']}." if item["expires_at"] else ""
    if item["override_flag"] is None:
        return (
            f"The {item['gate']} gate held the call of {item.get('tool')} "
            f"({item['code']}): {item['message']}. Approve to run it once as shown; edit to run "
            f"it with other arguments; reject to keep it from running.{deadline}"
        )
    return (
        f"The {item['gate']} gate denied decision {item['decision_id']} ({item['code']}): "
        f"{item['message']}. Approve to execute it anyway with {item['override_flag']}=true; "
        f"reject to keep it blocked.{deadline}"
    )


def escalation_request(gate: str, items: Sequence[EscalationItem]) -> EscalationRequest:
    """The ``batched`` interrupt value asking an operator about ``items`` (all of one gate)."""
    # ``arguments`` repeats ``args`` for Agent Inbox, which reads a HITLRequest's arguments
    # there (src/components/agent-inbox/contexts/utils.ts, normalizeInterrupt)
    requests = [
        cast(
            ActionRequest,
            {
                "name": _action(i),
                "args": dict(i["args"]),
                "description": _description(i),
                "arguments": dict(i["args"]),
            },
        )
        for i in items
    ]
    # ``cast``, not the constructor: langchain marks ``args_schema`` ``typing.NotRequired``, which
    # mypy's Python 3.10 target does not know, so it reads the key as required
    reviews = [
        cast(
            ReviewConfig,
            {"action_name": _action(i), "allowed_decisions": list(i["allowed_decisions"])},
        )
        for i in items
    ]
    first = items[0]
    return EscalationRequest(
        action_requests=requests,
        review_configs=reviews,
        escalations=list(items),
        # the EscalationItem fields, repeating escalations[0] (the digest: the whole request's)
        gate=first["gate"],
        code=first["code"],
        message=first["message"],
        override_hint=first["override_hint"],
        decision_id=first["decision_id"],
        webhook_url=first["webhook_url"],
        override_flag=first["override_flag"],
        tool_call_id=first["tool_call_id"],
        escalation_id=first["escalation_id"],
        thread_id=first["thread_id"],
        args=dict(first["args"]),
        allowed_decisions=list(first["allowed_decisions"]),
        policy_snapshot_id=first["policy_snapshot_id"],
        digest=request_digest(items),
        interrupt_id=first["interrupt_id"],
        asked_at=first["asked_at"],
        expires_at=first["expires_at"],
        resume_with={
            "decisions": [{"type": " | ".join(i["allowed_decisions"])} for i in items],
            "operator": "who decides (the authenticated identity when served with auth)",
            "digest": "optional: the digest reviewed (a stale one is refused)",
        },
    )


def tool_approval(item: EscalationItem) -> EscalationApproval:
    """The ``per_call`` interrupt value asking about one escalated call."""
    return EscalationApproval(
        type="tool_approval",
        tool_call_id=str(item["tool_call_id"] or ""),
        name=_action(item),
        args=dict(item["args"]),
        description=_description(item),
        escalations=[item],
        gate=item["gate"],
        escalation_id=item["escalation_id"],
        digest=item["digest"],
        expires_at=item["expires_at"],
    )


# --------------------------------------------------------------------------- the answer


@dataclass(frozen=True)
class Decided:
    """One operator decision on one escalated call, validated."""

    type: DecisionType
    """LangChain's decision type (Agent Inbox's ``accept`` is ``approve``, ``ignore`` is
    ``reject``, ``response`` is ``respond``)."""
    reason: str | None = None
    """Why (``message`` or the answer's ``reason``); for ``respond``, the text for the model."""
    edited_args: dict[str, Any] | None = None
    """For ``edit``: the arguments to send (scrubbed, checked: :func:`edited_arguments`)."""
    form: str = "hitl"
    """How it was given: ``hitl``, ``inbox``, ``short`` or ``per_call``."""

    @property
    def action(self) -> OperatorAction:
        """``override`` (approve, edit) or ``decline`` (reject, respond)."""
        return "override" if self.type in ("approve", "edit") else "decline"

    def verdict(self, original_args: Mapping[str, Any]) -> OperatorVerdict:
        """What the record says the operator did (:data:`~algenta_graph.state.OperatorVerdict`)."""
        if self.type == "approve":
            return "overrode" if self.form == "short" else "approved"
        if self.type == "edit":
            return "modified" if self.edited_args != _sent(original_args) else "approved"
        return "responded" if self.type == "respond" else "declined"


@dataclass(frozen=True)
class OperatorAnswer:
    """A validated answer: who gave it, and one :class:`Decided` per escalated call."""

    operator: str | None
    decisions: tuple[Decided, ...]
    digests: tuple[str, ...] = field(default=())
    """The digests the answer was checked against (one per call)."""

    def as_claim(
        self,
        operator: str,
        *,
        items: Sequence[EscalationItem],
        thread_id: Any = None,
        roles: Sequence[str] = (),
        decided_at: str,
        expired: Sequence[bool] = (),
    ) -> dict[str, Any]:
        """The answer as its claim stores it (:func:`~algenta_graph.governance.claims.new_claim`).

        ``operator`` (who answered), its ``roles``, ``decided_at``, ``thread_id`` (where it was
        given, when given) and ``decisions``: per call its ``action``, ``reason``, ``verdict``,
        ``type``, ``edited_args``, ``digest`` and ``interrupt_id``. An ``expired`` call is
        declined whatever the answer (its verdict ``expired``).
        """
        late = list(expired) or [False] * len(items)
        decisions = []
        for decided, item, overdue in zip(self.decisions, items, late, strict=True):
            entry: dict[str, Any] = {
                "action": decided.action,
                "reason": decided.reason,
                "type": decided.type,
                "verdict": decided.verdict(item["args"]),
                "edited_args": decided.edited_args,
                "digest": item["digest"],
                "interrupt_id": item["interrupt_id"],
                "asked_at": item["asked_at"],
                "expires_at": item["expires_at"],
            }
            if overdue:
                entry.update(
                    action="decline",
                    verdict="expired",
                    edited_args=None,
                    reason=(
                        f"the escalation expired at {item['expires_at']}; the operator's "
                        f"{decided.type} arrived after it and was not executed"
                        + (f" ({decided.reason})" if decided.reason else "")
                    ),
                )
            decisions.append(entry)
        claim: dict[str, Any] = {
            "operator": operator,
            "roles": list(roles),
            "decided_at": decided_at,
            "decisions": decisions,
        }
        if thread_id:
            claim["thread_id"] = str(thread_id)
        return claim


def _sent(args: Mapping[str, Any]) -> dict[str, Any]:
    """Reviewed arguments as the operator path sends them (no flag: the gate's is added)."""
    return {k: v for k, v in scrub_arguments(args).items() if k not in GRAPH_SUPPLIED_FIELDS}


def _coerced(value: Any, original: Any) -> Any:
    """A text field's value in its original type.

    Agent Chat UI and Agent Inbox send every edited argument back as the text in their edit
    box (numbers and objects as JSON).
    """
    if isinstance(value, str) and original is not None and not isinstance(original, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def edited_call_arguments(edited: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments an ``edit`` of a held call runs with, scrubbed like a model's call.

    Every override flag (any spelling, at any depth) and every graph-supplied field is dropped.

    Raises:
        ValueError: the edit's arguments are not an object.

    >>> edited_call_arguments({"id": "a1", "Force": True, "idempotency_key": "k"})
    {'id': 'a1'}
    """
    if not isinstance(edited, Mapping):
        raise ValueError(f"edit: args must be an object, got {type(edited).__name__}")
    return {
        k: v for k, v in scrub_arguments(dict(edited)).items() if k not in GRAPH_SUPPLIED_FIELDS
    }


def edited_arguments(reviewed: Mapping[str, Any], edited: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments an ``edit`` sends, scrubbed like a model's call and checked.

    Every override flag (any gate's, any spelling, at any depth) and every graph-supplied field
    is dropped, as from a model's call: the escalated gate's override is the operator path's to
    add. Text values are read back in their reviewed type (:func:`_coerced`).

    Raises:
        ValueError: the edit changes the decision (an approval is bound to the decision
            reviewed), names an argument ``execute_decision`` does not take, or its arguments
            are malformed; the message names it.

    >>> edited_arguments({"decision_id": "d1", "webhook_url": "u", "timeout_seconds": 5,
    ...                   "force": True},
    ...                  {"decision_id": "d1", "webhook_url": "v", "timeout_seconds": "9",
    ...                   "force": "true", "override_safety": True})
    {'decision_id': 'd1', 'webhook_url': 'v', 'timeout_seconds': 9}
    """
    args = {
        k: v for k, v in scrub_arguments(dict(edited)).items() if k not in GRAPH_SUPPLIED_FIELDS
    }
    decision = args.get("decision_id", reviewed.get("decision_id"))
    if decision != reviewed.get("decision_id"):
        raise ValueError(
            f"edit: decision_id {decision!r} is not the decision reviewed "
            f"({reviewed.get('decision_id')!r}); an approval is bound to the decision it "
            "reviewed: refused, nothing was executed"
        )
    unknown = sorted(set(args) - {"decision_id", *EDITABLE_ARGUMENTS})
    if unknown:
        raise ValueError(
            f"edit: execute_decision takes no argument {', '.join(map(repr, unknown))} "
            f"(an edit may change {', '.join(EDITABLE_ARGUMENTS)})"
        )
    out = {
        "decision_id": decision,
        **{k: _coerced(args[k], reviewed.get(k)) for k in EDITABLE_ARGUMENTS if k in args},
    }
    out.setdefault("webhook_url", reviewed.get("webhook_url"))
    if "metadata" in out and not isinstance(out["metadata"], Mapping):
        raise ValueError(f"edit: metadata must be an object, got {type(out['metadata']).__name__}")
    bad = bad_arguments(out)
    if bad:
        raise ValueError(f"edit: {'; '.join(bad)}")
    return out


# the answer's shapes (LangGraph checks an answer against them before it is saved) -----------

_Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
_DECISION_TYPES: dict[str, DecisionType] = {
    "accept": "approve",
    "ignore": "reject",
    "response": "respond",
    "edit": "edit",
}


def _typed_dict(name: str, fields: dict[str, Any]) -> Any:
    made = cast(Any, TypedDict)(name, fields)
    made.__pydantic_config__ = ConfigDict(extra="forbid")
    return made


def _shapes(
    require_reason: bool, allowed: Sequence[DecisionType], names: Sequence[str] = (EXECUTE_TOOL,)
) -> dict[str, Any]:
    """The decision TypedDicts: LangChain's, plus ``message``, ``digest`` and ``operator``.

    The served graph stamps the authenticated operator on an answer; ``message`` (the reason)
    is required when the deployment requires reasons.
    """
    reason = _Text if require_reason else NotRequired[_Text]
    extra = {"digest": NotRequired[str], "operator": NotRequired[str]}
    action = _typed_dict(
        "EditedAction", {"name": _Literal[tuple(dict.fromkeys(names))], "args": dict[str, Any]}
    )
    every: dict[str, Any] = {
        "approve": _typed_dict(
            "ApproveDecision", {"type": Literal["approve"], "message": reason, **extra}
        ),
        "edit": _typed_dict(
            "EditDecision",
            {"type": Literal["edit"], "edited_action": action, "message": reason, **extra},
        ),
        "reject": _typed_dict(
            "RejectDecision", {"type": Literal["reject"], "message": reason, **extra}
        ),
        "respond": _typed_dict(
            "RespondDecision", {"type": Literal["respond"], "message": _Text, **extra}
        ),
    }
    return {t: every[t] for t in dict.fromkeys(allowed)}


# the answer's types are built at run time (per request): typing's forms, seen as values
_Annotated: Any = Annotated
_Union: Any = Union
_Literal: Any = Literal
_List: Any = list


def _union(members: Sequence[Any], key: str, message: str) -> Any:
    if len(members) == 1:
        return members[0]
    found = Discriminator(key, custom_error_type="answer_type", custom_error_message=message)
    return _Annotated[_Union[tuple(members)], found]


def _form(value: Any) -> str | None:
    if isinstance(value, list):
        return "inbox"
    if not isinstance(value, Mapping):
        return None
    if "action" in value:
        return "short"
    if "type" in value and "decisions" not in value:
        return "decision"
    return "hitl"


def answer_schema(
    items: Sequence[EscalationItem],
    settings: EscalationSettings,
    *,
    per_call: bool,
    check: Callable[[OperatorAnswer], OperatorAnswer],
) -> Any:
    """The ``response_schema`` of an interrupt about ``items``: a type LangGraph checks with.

    The answer's shape (published to clients as JSON Schema: the decisions each gate accepts,
    whether a reason is required), then what a shape cannot say (:func:`_decide`: stale digests,
    the decisions each call accepts, edits), then ``check`` (who answers). A pydantic
    ``RootModel`` named ``EscalationAnswer``, whose ``root`` is the :class:`OperatorAnswer`; a
    problem is a ``ValidationError`` naming it (LangGraph raises it before the answer is saved).
    """
    n = len(items)
    allowed: list[DecisionType] = list(
        dict.fromkeys(d for i in items for d in i["allowed_decisions"])
    )
    shapes = _shapes(settings.require_reason, allowed, [_action(i) for i in items])
    decision = _union(
        list(shapes.values()),
        "type",
        f"a decision's type must be one this escalation accepts: {', '.join(shapes)}",
    )
    short = _typed_dict(
        "ShortAnswer",
        {
            "action": Literal["override", "decline"],
            "operator": NotRequired[str],
            "reason": _Text if settings.require_reason else NotRequired[_Text],
            "digest": NotRequired[str],
        },
    )
    inbox_args = _Union[None, str, _typed_dict("InboxAction", {"action": str, "args": dict})]
    inbox_response = _typed_dict(
        "InboxResponse",
        {
            "type": Literal["accept", "ignore", "response", "edit"],
            "args": inbox_args,
            "operator": NotRequired[str],
            "digest": NotRequired[str],
        },
    )
    inbox = _Annotated[_List[inbox_response], Field(min_length=n, max_length=n)]
    members: list[Any]
    if per_call:
        members = [_Annotated[decision, Tag("decision")]]
    else:
        hitl = _typed_dict(
            "HITLResponse",
            {
                "decisions": _Annotated[_List[decision], Field(min_length=n, max_length=n)],
                "operator": NotRequired[str],
                "reason": NotRequired[_Text],
                "digest": NotRequired[str],
            },
        )
        members = [_Annotated[hitl, Tag("hitl")]]
    members += [_Annotated[short, Tag("short")], _Annotated[inbox, Tag("inbox")]]
    expected = (
        "one decision ({'type': ...})" if per_call else "{'decisions': [one per action request]}"
    )
    accepted = {"decision" if per_call else "hitl", "short", "inbox"}

    def form_of(value: Any) -> str | None:
        found = _form(value)
        return found if found in accepted else None  # None: the message below

    form = Discriminator(
        form_of,
        custom_error_type="answer_shape",
        custom_error_message=(
            f"not an answer to this escalation: answer {expected}, the short form "
            "{'action': 'override' | 'decline'}, or Agent Inbox's list of responses"
        ),
    )
    shape = _Annotated[_Union[tuple(members)], form]

    def validate(raw: Any) -> OperatorAnswer:
        return check(_decide(raw, items, settings, per_call=per_call))

    root: Any = RootModel[_Annotated[shape, AfterValidator(validate)]]  # type: ignore[misc]
    return type("EscalationAnswer", (root,), {"__doc__": "An answer to an escalation."})


def _stale(given: str | None, expected: str, what: str) -> None:
    if given is not None and given != expected:
        raise ValueError(
            f"stale answer: it was given for {given}, but the escalation pending here is {what} "
            f"(digest {expected}); nothing was done: review the pending escalation and answer "
            "again"
        )


def _decide(
    raw: Any, items: Sequence[EscalationItem], settings: EscalationSettings, *, per_call: bool
) -> OperatorAnswer:
    """An answer already of a valid shape, as one :class:`Decided` per item (see the module)."""
    form = _form(raw) or "hitl"
    operator: str | None = None
    top_reason: str | None = None
    entries: list[tuple[DecisionType, str | None, Any, str | None]] = []  # type, why, edit, digest
    if form == "short":
        operator = raw.get("operator")
        top_reason = raw.get("reason")
        _stale(raw.get("digest"), request_digest(items), _which(items))
        kind: DecisionType = "approve" if raw["action"] == "override" else "reject"
        entries = [(kind, None, None, None)] * len(items)
    elif form == "inbox":
        for index, response in enumerate(raw):
            operator = operator or response.get("operator")
            args = response.get("args")
            kind = _DECISION_TYPES[response["type"]]
            why = args if response["type"] == "response" and isinstance(args, str) else None
            if kind == "respond" and not (why or "").strip():
                raise ValueError("response: args must be the text for the model")
            edit = args.get("args") if kind == "edit" and isinstance(args, Mapping) else None
            action = _action(items[index]) if index < len(items) else EXECUTE_TOOL
            if kind == "edit" and (not isinstance(args, Mapping) or args.get("action") != action):
                raise ValueError(
                    f"edit: args must be {{'action': '{action}', 'args': {{...}}}} (the "
                    "escalated call; an edit cannot call another tool)"
                )
            entries.append((kind, why, edit, response.get("digest")))
        if settings.require_reason and any(k != "respond" for k, *_ in entries):
            raise ValueError(
                "this deployment requires a reason for every answer, and Agent Inbox's accept, "
                "ignore and edit carry none: answer with LangChain's decisions and a message"
            )
    else:
        decisions = [raw] if form == "decision" else raw["decisions"]
        if form == "hitl":
            operator = raw.get("operator")
            top_reason = raw.get("reason")
            _stale(raw.get("digest"), request_digest(items), _which(items))
        for index, d in enumerate(decisions):
            operator = operator or d.get("operator")
            edit = d["edited_action"]["args"] if d["type"] == "edit" else None
            named = d["edited_action"]["name"] if edit is not None else None
            if named is not None and index < len(items) and named != _action(items[index]):
                raise ValueError(
                    f"edit: edited_action.name {named!r} is not the escalated call's tool "
                    f"{_action(items[index])!r}; an edit cannot call another tool"
                )
            entries.append((d["type"], d.get("message"), edit, d.get("digest")))
    out: list[Decided] = []
    for i, (item, (kind, why, edit, digest)) in enumerate(zip(items, entries, strict=True)):
        where = f"decisions[{i}]" if len(items) > 1 else "decision"
        _stale(digest, item["digest"], f"escalation {item['escalation_id']}")
        if kind not in item["allowed_decisions"]:
            raise ValueError(
                f"{where}: {kind!r} is not accepted for this {item['gate']} escalation; allowed: "
                f"{', '.join(item['allowed_decisions'])}"
            )
        reason = (why or top_reason or "").strip() or None
        edited: dict[str, Any] | None = None
        if kind == "edit":
            held = item["override_flag"] is None
            edited = edited_call_arguments(edit) if held else edited_arguments(item["args"], edit)
        out.append(Decided(kind, reason, edited, "per_call" if per_call else form))
    name = operator.strip() if isinstance(operator, str) and operator.strip() else None
    return OperatorAnswer(name, tuple(out), tuple(i["digest"] for i in items))


def _which(items: Sequence[EscalationItem]) -> str:
    return "escalation " + ", ".join(i["escalation_id"] for i in items)


# --------------------------------------------------------------------------- who answers


def _user(config: RunnableConfig | None) -> Any:
    return ((config or {}).get("configurable") or {}).get("langgraph_auth_user")


def _field(user: Any, name: str, default: Any = None) -> Any:
    if isinstance(user, Mapping):
        return user.get(name, default)
    return getattr(user, name, default)


def authenticated_identity(config: RunnableConfig | None) -> str | None:
    """The identity LangGraph's auth put on this run, if the graph is served with auth."""
    user = _user(config)
    if user is None:
        return None
    identity = _field(user, "identity")
    return str(identity) if identity and _field(user, "is_authenticated", True) else None


def authenticated_roles(config: RunnableConfig | None) -> list[str]:
    """The roles (permissions) of the authenticated user of this run (``[]`` without auth)."""
    if authenticated_identity(config) is None:
        return []
    permissions = _field(_user(config), "permissions")
    if permissions is None:
        permissions = ((config or {}).get("configurable") or {}).get("langgraph_auth_permissions")
    return [str(p) for p in permissions or () if isinstance(p, str)]
