"""What an operator's answer to an escalation may be.

What the operator is asked is :mod:`algenta_graph.nodes.questions`; who the operator is,
:mod:`algenta_graph.nodes.operators`.

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
whole request): an answer for anything but the pending escalation, or given under other rules
than those in force (the digest binds them: a rule changed since, the graph rebuilt), is refused
as **stale**, naming the rules in force. An approval or an edit must keep every argument rule in
force for the tool it runs (:func:`check_rules`; an ``arguments`` escalation's approval
overrides the rule that held it, and no other). Who
the operator is comes from the authenticated identity when served with auth
(:func:`~algenta_graph.nodes.operators.authenticated_identity`), else from the answer's
``operator``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Union, cast

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

from algenta_graph.connection.client import EXECUTE_TOOL
from algenta_graph.governance.escalations import (
    DecisionType,
    EscalationSettings,
    already_approved,
)
from algenta_graph.governance.scrub import GRAPH_SUPPLIED_FIELDS, scrub_arguments
from algenta_graph.governance.tool_gates import CompiledGates
from algenta_graph.nodes.arguments import bad_arguments
from algenta_graph.nodes.questions import (
    EscalationItem,
    action_name,
    request_digest,
    reviewed_tool,
)
from algenta_graph.records import OperatorAction, OperatorVerdict

__all__ = [
    "EDITABLE_ARGUMENTS",
    "Decided",
    "OperatorAnswer",
    "answer_schema",
    "check_quorum",
    "check_rules",
    "edited_arguments",
    "edited_call_arguments",
]

EDITABLE_ARGUMENTS: tuple[str, ...] = ("webhook_url", "timeout_seconds", "metadata")
"""What an ``edit`` may change in an escalated ``execute_decision`` call (``decision_id`` may be
sent back unchanged: an approval is bound to the decision reviewed)."""


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
        """The operator's verdict, as recorded (:data:`~algenta_graph.records.OperatorVerdict`)."""
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

    @property
    def approves_all(self) -> bool:
        """Whether it approves every call it answers (what counts toward a quorum)."""
        return all(d.type == "approve" for d in self.decisions)

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
    shapes = _shapes(settings.require_reason, allowed, [action_name(i) for i in items])
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

    # the model's type is built at run time (one per escalation), which no static type can be
    root: Any = cast(Any, RootModel)[_Annotated[shape, AfterValidator(validate)]]
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
            action = action_name(items[index]) if index < len(items) else EXECUTE_TOOL
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
            if named is not None and index < len(items) and named != action_name(items[index]):
                raise ValueError(
                    f"edit: edited_action.name {named!r} is not the escalated call's tool "
                    f"{action_name(items[index])!r}; an edit cannot call another tool"
                )
            entries.append((d["type"], d.get("message"), edit, d.get("digest")))
    out: list[Decided] = []
    for i, (item, (kind, why, edit, digest)) in enumerate(zip(items, entries, strict=True)):
        where = f"decisions[{i}]" if len(items) > 1 else "decision"
        _stale(digest, item["digest"], f"escalation {item['escalation_id']}{_under(item)}")
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
    return "escalation " + ", ".join(i["escalation_id"] + _under(i) for i in items)


def _under(item: EscalationItem) -> str:
    """The rules an escalation is asked under, for a stale answer's message (none: ``""``)."""
    rules = item.get("rules")
    if not rules:
        return ""
    said = [f"policy {rules.get('policy')}"]
    said += [f"require_approval {p!r}" for p in rules.get("require_approval") or ()]
    said += [f"approvals {a['tool']!r} quorum {a['quorum']}" for a in rules.get("approvals") or ()]
    said += [f"allow {p!r}" for p in rules.get("allow") or ()]
    said += [f"budget {json.dumps(b, sort_keys=True)}" for b in rules.get("budgets") or ()]
    for rule in rules.get("argument_rules") or ():
        check = rule.get("schema") if rule.get("schema") is not None else rule.get("predicate")
        said.append(f"argument rule {rule.get('name')!r} {json.dumps(check, sort_keys=True)}")
    if rules.get("destructive"):
        said.append("destructiveHint")
    if rules.get("unlisted") not in (None, "allow"):
        said.append(f"unlisted {rules.get('unlisted')!r}")
    return (
        f", asked under the rules now in force for {rules.get('tool')} ({'; '.join(said)}): a "
        "rule changed since the answer was given makes it stale"
    )


def check_rules(
    answer: OperatorAnswer, items: Sequence[EscalationItem], gates: CompiledGates | None
) -> None:
    """Refuse an answer that would run a call breaking an argument rule in force.

    Each approval and edit, of a held call as of an engine gate's escalation (its tool
    ``execute_decision``), is checked on the real MCP name of the tool it runs
    (:func:`~algenta_graph.nodes.questions.reviewed_tool`) against every argument rule naming
    it: an edit with its edited arguments, an approval with what it runs (an ``arguments``
    escalation's approval overrides the rule that held it, and no other). The budgets do not
    depend on the arguments: a held call's are checked again just before it runs, an engine
    decision's call was counted when it was let through.

    Raises:
        ValueError: naming the rule broken (the answer is refused before it is saved; nothing
            ran).
    """
    if gates is None:
        return
    for decided, item in zip(answer.decisions, items, strict=False):
        if decided.type == "edit" and decided.edited_args is not None:
            args, overridden, what = decided.edited_args, None, "edit"
        elif decided.type == "approve":
            held = item["override_flag"] is None
            args = dict(item["args"]) if held else _sent(item["args"])
            overridden = item.get("rule") if item["gate"] == "arguments" else None
            what = "approve"
        else:
            continue
        broken = gates.check_arguments(reviewed_tool(item), args, overridden=overridden)
        if broken is not None:
            raise ValueError(
                f"{what}: {broken.message}; refused, nothing was run: "
                + ("edit within the rule, or reject" if what == "edit" else "reject, or edit it")
            )


def check_quorum(answer: OperatorAnswer, approved: Sequence[str], quorum: int) -> None:
    """Refuse an answer a quorum cannot count: an operator's second approval, or a mixed one.

    ``approved``: who approved in the answers before this one (the operator's identity, never
    the token it came with). Under a quorum (``quorum`` > 1) an answer approves every call of
    the request, or ends it (reject, respond); an approval by an operator in ``approved`` is
    refused by name.

    Raises:
        ValueError: naming the operator or the mix (the answer is refused before it is saved;
            nothing is counted or run).
    """
    if quorum < 2:
        return
    types = {d.type for d in answer.decisions}
    if "approve" in types and len(types) > 1:
        raise ValueError(
            f"under a quorum of {quorum} an answer approves every call of this request or "
            f"declines them, not a mix ({', '.join(sorted(types))}): nothing was counted"
        )
    if answer.approves_all and answer.operator in approved:
        raise ValueError(already_approved(answer.operator, approved, quorum))
