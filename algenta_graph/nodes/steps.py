"""Reading a governed step out of the messages, and writing its answers.

A **step** is the latest AI message with tool calls and the tool messages answering it. Every
node reads the step the same way (:func:`last_step`, :func:`step_denials`, :func:`gate_order`)
and answers a call the same way (:func:`tool_message`, tagged with its outcome under
:data:`OUTCOME_KEY`, placed by :func:`in_place`). What the model is told about a receipt or a
denial is written here too (:func:`receipt_text`, :func:`denial_text`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    ToolMessage,
)
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from algenta_graph.connection.outcomes import ExecutionDenial, ExecutionReceipt
from algenta_graph.governance.gates import GATE_NAMES, POLICIES, Policy, policy_for
from algenta_graph.records import DenialRecord

__all__ = [
    "HALT",
    "OUTCOME_KEY",
    "denial_text",
    "gate_order",
    "in_place",
    "last_step",
    "latest_user_text",
    "message_text",
    "plain_content",
    "receipt_text",
    "step_denials",
    "tool_message",
]

OUTCOME_KEY = "algenta_outcome"
"""``ToolMessage.response_metadata`` key naming the call's outcome (``ok``, ``failed``,
``gate:<name>``)."""


HALT = "halt"
"""The route of a step the graph must end: a halting policy, or a gate it does not know."""


def last_step(messages: Sequence[BaseMessage]) -> tuple[AIMessage | None, list[ToolMessage]]:
    """The latest AI message with tool calls and the tool messages answering it."""
    for i in range(len(messages) - 1, -1, -1):
        msg = messages[i]
        if isinstance(msg, AIMessage) and msg.tool_calls:
            ids = {c["id"] for c in msg.tool_calls}
            answers = [
                m for m in messages[i + 1 :] if isinstance(m, ToolMessage) and m.tool_call_id in ids
            ]
            return msg, answers
    return None, []


def message_text(message: BaseMessage) -> str:
    """A message's text: its text blocks joined by a space.

    ``BaseMessage.text`` joins them with nothing, which glues the words of separate blocks:
    ``["simulate", "the pricing"]``.

    >>> message_text(HumanMessage(["simulate", {"type": "text", "text": "the pricing"}]))
    'simulate the pricing'
    """
    content = message.content
    if isinstance(content, str):
        return content
    return " ".join(
        p if isinstance(p, str) else str(p.get("text", ""))
        for p in content
        if isinstance(p, str) or p.get("type", "text") == "text"
    )


def latest_user_text(messages: Sequence[BaseMessage]) -> str:
    """The text of the latest user message (this turn's query), or ``""``."""
    return next((message_text(m) for m in reversed(messages) if isinstance(m, HumanMessage)), "")


def step_denials(state: Mapping[str, Any]) -> list[DenialRecord]:
    """The denials of the latest tool step that a handler must apply a policy to.

    The model's calls' denials (the engine's, and the graph-side gates' ``source == "graph"``),
    and the denials an operator's override met that were raised under a policy (routed like any
    other; an override's denial recorded without one is not).
    """
    _, answered = last_step(state.get("messages", []))
    ids = {m.tool_call_id for m in answered}
    return [
        d
        for d in state.get("denials") or []
        if d.get("tool_call_id") in ids
        and (
            d.get("source") in ("model", "thread_receipts", "graph")
            or (d.get("source") == "operator" and "policy" in d)
        )
    ]


def gate_order(denials: Sequence[Mapping[str, Any]]) -> list[str]:
    """The gates of a step's denials, strictest policy first (ties in table order)."""
    policy: dict[str, Policy] = {}
    for d in denials:
        gate = str(d.get("gate"))
        recorded = d.get("policy")
        p: Policy = recorded if recorded in POLICIES else policy_for(gate, {})
        if gate not in policy or POLICIES.index(p) > POLICIES.index(policy[gate]):
            policy[gate] = p
    table = {g: i for i, g in enumerate(GATE_NAMES)}
    return sorted(policy, key=lambda g: (-POLICIES.index(policy[g]), table.get(g, -1)))


def in_place(
    messages: Sequence[BaseMessage], ai: AIMessage, answers: list[ToolMessage]
) -> list[BaseMessage]:
    """The ``messages`` update that puts ``answers`` right after ``ai``'s call.

    Right after the call and its earlier answers, as every provider requires.

    Normally that is ``answers`` themselves (appended). When a later turn's messages already
    follow the call (a step cut short by a cancel or a crash, finished by the next turn,
    invariant 13), the whole list is rewritten in order, every message keeping its id.
    """
    index = next((i for i, m in enumerate(messages) if m is ai), None)
    later = list(messages[index + 1 :]) if index is not None else []
    if index is None or all(isinstance(m, ToolMessage) for m in later):
        return list(answers)
    ids = {c["id"] for c in ai.tool_calls}
    earlier = [m for m in later if isinstance(m, ToolMessage) and m.tool_call_id in ids]
    rest = [m for m in later if not (isinstance(m, ToolMessage) and m.tool_call_id in ids)]
    return [
        RemoveMessage(id=REMOVE_ALL_MESSAGES),
        *messages[: index + 1],
        *earlier,
        *answers,
        *rest,
    ]


def tool_message(
    content: str | list[Any],
    *,
    name: str,
    tool_call_id: str,
    outcome: str,
    status: Literal["success", "error"] = "success",
    artifact: Any = None,
    msg_id: str | None = None,
) -> ToolMessage:
    """A ToolMessage tagged with its outcome (what :meth:`GovernedToolNode.route` reads)."""
    return ToolMessage(
        content=content,
        name=name,
        tool_call_id=tool_call_id,
        status=status,
        artifact=artifact,
        id=msg_id or str(uuid.uuid4()),
        response_metadata={OUTCOME_KEY: outcome},
    )


def denial_text(decision_id: Any, denial: ExecutionDenial) -> str:
    """What the model is told about a denial: the gate, the reason, and that it cannot override."""
    return (
        f"DENIED: execute_decision for decision {decision_id} was blocked by the "
        f"{denial.gate} gate ({denial.code}): {denial.message}. Nothing was executed. "
        "You (the model) cannot override this gate, and retrying will be denied again; "
        "only a human operator can override it, outside this conversation. "
        "Tell the user which gate blocked the decision and why."
    )


def receipt_text(receipt: ExecutionReceipt, note: str = "") -> str:
    """What the model is told about a receipt."""
    data = receipt.model_dump(mode="json")
    head = (
        f"Executed decision {receipt.decision_id}: {receipt.execution_status}"
        f" (webhook {receipt.webhook_url} answered {receipt.response_code})"
    )
    return f"{head}{note}.\nReceipt: {json.dumps(data, sort_keys=True)}"


def plain_content(content: Any) -> str | list[Any]:
    """MCP text blocks joined into one string; any other content passed through unchanged."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(b, Mapping) and b.get("type") == "text" for b in content
    ):
        return "\n".join(str(b.get("text", "")) for b in content)
    return list(content) if isinstance(content, list) else str(content)
