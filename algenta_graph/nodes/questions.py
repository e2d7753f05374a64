"""What an operator is asked about an escalation (the question; :mod:`.answers` is the answer).

In the default ``batched`` mode the ``interrupt()`` value of a denial handler is an
:class:`EscalationRequest`: LangChain's human-in-the-loop ``HITLRequest`` (one
``action_requests[i]`` and one ``review_configs[i]`` per escalated call, the review config naming
the decisions that gate accepts) plus Algenta's fields (``escalations[i]``, an
:class:`EscalationItem`: the denial, the escalation's identity, the **digest** of what the
operator is shown, the interrupt id, when it was asked and its deadline; the graph's rules in
force for the tool, which the digest binds). In ``per_call`` mode
each escalated call has an interrupt of its own, an :class:`EscalationApproval` (LangChain's
``ToolApprovalRequest``), answered with one decision.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from langchain.agents.middleware.human_in_the_loop import (
    ActionRequest,
    ReviewConfig,
    ToolApprovalRequest,
)
from typing_extensions import NotRequired, TypedDict

from algenta_graph.connection.catalog import ENGINE_EXECUTE
from algenta_graph.connection.client import EXECUTE_TOOL
from algenta_graph.governance.escalations import (
    DecisionType,
    EscalationSettings,
    approvals_said,
    escalation_digest,
)
from algenta_graph.governance.gates import GATES, OVERRIDE_FLAGS
from algenta_graph.governance.tool_gates import ToolRef
from algenta_graph.nodes.steps import step_denials
from algenta_graph.records import escalation_id_of

__all__ = [
    "EscalationApproval",
    "EscalationItem",
    "EscalationRequest",
    "action_name",
    "escalation_items",
    "escalation_request",
    "is_answered",
    "open_denials",
    "pending_escalations",
    "quorum_of",
    "request_digest",
    "reviewed_args",
    "reviewed_tool",
    "tool_approval",
]


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
    rule: NotRequired[str]
    """A held call's rule: the one that held it (an ``arguments`` escalation's approval
    overrides it, and no other)."""
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
    rules: dict[str, Any] | None
    """The graph's rules in force for the call's tool and the gate's policy
    (:meth:`~algenta_graph.governance.tool_gates.CompiledGates.in_force`), or ``None`` (no rules
    bound): the digest binds them, so an answer given under other rules is stale."""
    digest: str
    """The digest of what is shown (:func:`~algenta_graph.governance.escalations.
    escalation_digest`): an answer that carries another one is refused as stale."""
    interrupt_id: str | None
    """The id of the interrupt that asks about it (answer ``{interrupt_id: answer}``)."""
    asked_at: str | None
    """When the escalation was raised (ISO 8601, UTC)."""
    expires_at: str | None
    """Its deadline (its gate's ``expires_after``), or ``None``: past it, any answer declines."""
    quorum: NotRequired[int]
    """Under a quorum: how many distinct operators must approve before anything runs."""
    approvals: NotRequired[list[str]]
    """Under a quorum: who approved so far, in the order counted."""


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
    """What the operator is shown about each of ``denials`` (all of one gate).

    An engine gate's denial is shown as the call an approval executes (with the gate's override
    flag) under the engine's policy snapshot; a held call of a graph-side gate as its tool, its
    arguments and the rule that held it (no engine policy decides it: no snapshot).
    """
    flag = OVERRIDE_FLAGS[gate] if GATES[gate].side != "graph" else None
    snapshot = policy_snapshot_id if flag is not None else None
    items: list[EscalationItem] = []
    for denial, interrupt_id in zip(denials, interrupt_ids, strict=True):
        why = {
            "code": denial.get("code"),
            "message": denial.get("message"),
            "escalation_id": escalation_id_of(denial),
        }
        shown: dict[str, Any] = {
            "thread_id": thread_id,
            "tool_call_id": denial.get("tool_call_id"),
            "gate": gate,
        }
        allowed = list(settings.decisions_for(gate))
        held: dict[str, str] = {}
        tool = ENGINE_EXECUTE
        if flag is None:
            args = dict(denial.get("args") or {})
            tool = ToolRef(str(denial.get("server")), str(denial.get("tool")))
            held = {
                "action_name": str(denial.get("catalog_name") or denial.get("tool")),
                "tool": tool.qualified,
                "args_digest": str(denial.get("args_digest")),
                "rule": str(denial.get("rule")),
            }
            shown.update(tool=held["tool"], args=args, args_digest=denial.get("args_digest"))
            shown.update(rule=denial.get("rule"), denial=why)
        else:
            args = reviewed_args(denial, flag)
            if not isinstance(args["decision_id"], str) or not isinstance(args["webhook_url"], str):
                # nothing to execute: the call named no decision or target
                allowed = [d for d in allowed if d in ("reject", "respond")] or ["reject"]
            why.update(override_hint=denial.get("override_hint"))
            why.update(status_code=denial.get("status_code"))
            shown.update(decision_id=denial.get("decision_id"), args=args, denial=why)
            shown.update(policy_snapshot_id=snapshot)
        in_force = settings.rules_in_force
        rules = dict(in_force(gate, tool)) if in_force is not None else None
        shown.update(rules=rules)
        if _rules_quorum(rules) > 1:  # the gate's own quorum already left edit out
            allowed = [d for d in allowed if d != "edit"]
        engine = denial if flag is not None else {}
        item = EscalationItem(
            gate=gate,
            code=denial.get("code"),
            message=denial.get("message"),
            override_hint=engine.get("override_hint"),
            decision_id=engine.get("decision_id"),
            webhook_url=engine.get("webhook_url"),
            override_flag=flag,
            tool_call_id=denial.get("tool_call_id"),
            escalation_id=escalation_id_of(denial),
            thread_id=thread_id,
            args=args,
            allowed_decisions=allowed,
            policy_snapshot_id=snapshot,
            rules=rules,
            digest=escalation_digest(shown),
            interrupt_id=interrupt_id,
            asked_at=denial.get("raised_at"),
            expires_at=expires(denial),
        )
        if held:
            item["action_name"] = held["action_name"]
            item["tool"] = held["tool"]
            item["args_digest"] = held["args_digest"]
            item["rule"] = held["rule"]
        items.append(item)
    return items


def _rules_quorum(rules: Mapping[str, Any] | None) -> int:
    """The quorum the rules in force set for a tool's calls (``[[tool_gates.approvals]]``).

    >>> _rules_quorum({"approvals": [{"tool": "crm.*", "quorum": 2},
    ...                              {"tool": "crm.delete_*", "quorum": 3}]})
    3
    >>> _rules_quorum(None), _rules_quorum({"approvals": []})
    (1, 1)
    """
    return max((int(a["quorum"]) for a in (rules or {}).get("approvals") or ()), default=1)


def quorum_of(gate: str, items: Sequence[EscalationItem], settings: EscalationSettings) -> int:
    """How many distinct operators must approve ``items`` (one request of ``gate``).

    The gate's quorum (:attr:`~algenta_graph.governance.escalations.EscalationSettings.quorum`)
    or the highest a reviewed tool's rules in force set (bound in each item's digest), whichever
    is higher: one request is approved as a whole.
    """
    return max([settings.quorum_for(gate), *(_rules_quorum(i.get("rules")) for i in items)])


def reviewed_tool(item: EscalationItem) -> ToolRef:
    """The tool an approval of ``item`` runs, as tool rules name it.

    A held call's own, else the engine's ``execute_decision`` (server names hold no dot, so
    ``server.name`` splits at the first one).
    """
    held = item.get("tool")
    return ToolRef.parse(held) if held else ENGINE_EXECUTE


def action_name(item: EscalationItem) -> str:
    """The tool the escalated call names (``execute_decision`` unless a held call's own)."""
    return item.get("action_name") or EXECUTE_TOOL


def request_digest(items: Sequence[EscalationItem]) -> str:
    """The digest of a whole request: its one item's, or a digest of every item's, in order."""
    if len(items) == 1:
        return items[0]["digest"]
    return escalation_digest({"args": [i["digest"] for i in items]})


def _description(item: EscalationItem) -> str:
    deadline = f" It expires at {item['expires_at']}." if item["expires_at"] else ""
    if "quorum" in item:
        said = approvals_said(item.get("approvals") or [], item["quorum"])
        deadline += f" Needs {item['quorum']} distinct operators' approvals ({said})."
    if item["override_flag"] is None:
        edits = "edit" in item["allowed_decisions"]
        edit = " edit to run it with other arguments;" if edits else ""
        return (
            f"The {item['gate']} gate held the call of {item.get('tool')} "
            f"({item['code']}): {item['message']}. Approve to run it once as shown;{edit} reject "
            f"to keep it from running.{deadline}"
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
                "name": action_name(i),
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
            {"action_name": action_name(i), "allowed_decisions": list(i["allowed_decisions"])},
        )
        for i in items
    ]
    first = items[0]
    return {
        # the EscalationItem fields repeat escalations[0], but the digest binds the whole request
        **first,
        "args": dict(first["args"]),
        "allowed_decisions": list(first["allowed_decisions"]),
        "digest": request_digest(items),
        "action_requests": requests,
        "review_configs": reviews,
        "escalations": list(items),
        "resume_with": {
            "decisions": [{"type": " | ".join(i["allowed_decisions"])} for i in items],
            "operator": "who decides (the authenticated identity when served with auth)",
            "digest": "optional: the digest reviewed (a stale one is refused)",
        },
    }


def tool_approval(item: EscalationItem) -> EscalationApproval:
    """The ``per_call`` interrupt value asking about one escalated call."""
    return EscalationApproval(
        type="tool_approval",
        tool_call_id=str(item["tool_call_id"] or ""),
        name=action_name(item),
        args=dict(item["args"]),
        description=_description(item),
        escalations=[item],
        gate=item["gate"],
        escalation_id=item["escalation_id"],
        digest=item["digest"],
        expires_at=item["expires_at"],
    )
