"""What a node run's input and update say, for telemetry: records, outcomes, pending asks.

A node's update is the only place the graph's governance facts appear (the nodes are not
instrumented themselves): the receipts, denials and operator decisions it recorded, and the
``execute_decision`` answers that ended in neither (a failure records nothing). Read-only,
and nothing here raises on an unexpected shape: telemetry never costs a governed step.

>>> facts = update_facts({"receipts": [{"decision_id": "d1", "execution_status": "delivered",
...     "source": "model", "tool_call_id": "c1"}]})
>>> [(f.kind, f.outcome, f.decision_id) for f in facts]
[('receipt', 'receipt', 'd1')]
>>> update_of(Command(update={"denials": []}))
{'denials': []}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langgraph.types import Command

from algenta_graph.governance.gates import POLICIES
from algenta_graph.telemetry import names
from algenta_graph.telemetry.engine_calls import span_context_of

__all__ = [
    "Asked",
    "Fact",
    "asked_escalations",
    "message_ids",
    "seconds_between",
    "step_policy",
    "update_facts",
    "update_of",
]

_OUTCOME_KEY = "algenta_outcome"  # nodes.steps.OUTCOME_KEY (telemetry sits below the nodes)
_EXECUTE = "execute_decision"  # connection.client.EXECUTE_TOOL (likewise)
_EXPIRED = "expired"


@dataclass(frozen=True)
class Fact:
    """One governed event a node recorded: a receipt, a denial, an operator decision, a failure."""

    kind: str
    """``receipt``, ``denial``, ``operator_decision`` or ``failure``."""
    outcome: str | None = None
    """For an execution: :data:`~algenta_graph.telemetry.names.Outcome`."""
    source: str | None = None
    """Where the record came from (``model``, ``operator``, ``recovered``, ...)."""
    decision_id: str | None = None
    """The decision."""
    gate: str | None = None
    """The gate (a denial's, an operator decision's)."""
    policy: str | None = None
    """A denial's policy."""
    tool_call_id: str | None = None
    """The model's tool call."""
    escalation_id: str | None = None
    """The escalation raised or answered."""
    operator: str | None = None
    """Who decided (an operator decision, an override's receipt)."""
    action: str | None = None
    """``override``, ``decline`` (an operator decision)."""
    expired: bool = False
    """An operator decision recording an expiry."""
    time: str | None = None
    """When an operator decision was recorded (ISO 8601)."""
    attributes: dict[str, Any] = field(default_factory=dict)
    """The span event's attributes."""


def update_of(outputs: Any) -> Mapping[str, Any]:
    """A node's state update: its returned dict, or the ``update`` of its ``Command``."""
    update = outputs.update if isinstance(outputs, Command) else outputs
    if isinstance(update, Mapping):
        return update
    if isinstance(update, Sequence) and not isinstance(update, str | bytes):
        try:
            return dict(update)
        except (TypeError, ValueError):
            return {}
    return {}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _records(update: Mapping[str, Any], field_name: str) -> list[Mapping[str, Any]]:
    value = update.get(field_name)
    if isinstance(value, Mapping):
        value = [value]
    if not isinstance(value, list):
        return []
    return [r for r in value if isinstance(r, Mapping)]


def _event(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def update_facts(update: Mapping[str, Any], known: Iterable[str] = ()) -> list[Fact]:
    """The governed events of a node's update, in record order.

    Args:
        update: the node's state update.
        known: ids of the messages the node was given (a ``ToolMessage`` among them is not a
            new answer: ``governed_tool`` may rewrite the whole message list).
    """
    facts: list[Fact] = []
    receipt_calls: set[str] = set()
    for r in _records(update, "receipts"):
        status = r.get("execution_status")
        outcome = "receipt" if status == "delivered" else str(status or "unknown")
        call_id = _text(r.get("tool_call_id"))
        if call_id:
            receipt_calls.add(call_id)
        fact = Fact(
            "receipt",
            outcome=outcome,
            source=_text(r.get("source")),
            decision_id=_text(r.get("decision_id")),
            tool_call_id=call_id,
            operator=_text(r.get("operator")),
        )
        facts.append(_with_event(fact, r.get("trace_id"), r.get("execution_id")))
    for d in _records(update, "denials"):
        fact = Fact(
            "denial",
            outcome="denial",
            source=_text(d.get("source")),
            decision_id=_text(d.get("decision_id")),
            gate=_text(d.get("gate")),
            policy=_text(d.get("policy")),
            tool_call_id=_text(d.get("tool_call_id")),
            escalation_id=_text(d.get("escalation_id")),
        )
        facts.append(_with_event(fact))
    for o in _records(update, "operator_decisions"):
        expired = _EXPIRED in (o.get("result"), o.get("outcome"), o.get("action"))
        call_id = _text(o.get("tool_call_id"))
        fact = Fact(
            "operator_decision",
            source="operator",
            decision_id=_text(o.get("decision_id")),
            gate=_text(o.get("gate")),
            tool_call_id=call_id,
            escalation_id=_text(o.get("escalation_id")),
            operator=_text(o.get("operator")),
            action=_text(o.get("action")),
            expired=expired,
            time=_text(o.get("decided_at")) or _text(o.get("time")),
        )
        facts.append(_with_event(fact, result=o.get("result")))
        if o.get("result") == "failed" and call_id not in receipt_calls and not expired:
            failure = Fact(
                "failure",
                outcome="failed",
                source="operator",
                decision_id=fact.decision_id,
                gate=fact.gate,
                tool_call_id=call_id,
                operator=fact.operator,
            )
            facts.append(_with_event(failure))
    seen = set(known)
    messages = update.get("messages")
    for m in messages if isinstance(messages, list) else []:
        if not isinstance(m, ToolMessage) or m.id in seen or m.name != _EXECUTE:
            continue
        if m.response_metadata.get(_OUTCOME_KEY) != "failed" or m.tool_call_id in receipt_calls:
            continue
        failure = Fact("failure", outcome="failed", source="model", tool_call_id=m.tool_call_id)
        facts.append(_with_event(failure))
    return facts


def _with_event(fact: Fact, trace_id: Any = None, execution_id: Any = None, **more: Any) -> Fact:
    fact.attributes.update(
        _event(
            **{
                names.ATTR_OUTCOME: fact.outcome,
                names.ATTR_SOURCE: fact.source,
                names.ATTR_DECISION_ID: fact.decision_id,
                names.ATTR_GATE: fact.gate,
                names.ATTR_POLICY: fact.policy,
                names.GEN_AI_TOOL_CALL_ID: fact.tool_call_id,
                names.ATTR_ESCALATION_ID: fact.escalation_id,
                names.ATTR_OPERATOR_IDENTITY: fact.operator,
                names.ATTR_OPERATOR_ACTION: fact.action,
                names.ATTR_RECEIPT_TRACE_ID: _text(trace_id),
                names.ATTR_EXECUTION_ID: _text(execution_id),
                "algenta.result": _text(more.get("result")),
            }
        )
    )
    return fact


def message_ids(state: Any) -> frozenset[str]:
    """The ids of the messages of a node's input state."""
    messages = state.get("messages") if isinstance(state, Mapping) else None
    if not isinstance(messages, list):
        return frozenset()
    return frozenset(m.id for m in messages if isinstance(m, BaseMessage) and m.id)


def _latest_step(messages: Sequence[Any]) -> tuple[set[str], dict[str, ToolMessage]]:
    """The tool call ids of the latest tool-calling AI message, and their answers."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if isinstance(m, AIMessage) and m.tool_calls:
            ids = {str(c.get("id")) for c in m.tool_calls}
            answers = {
                t.tool_call_id: t
                for t in messages[i + 1 :]
                if isinstance(t, ToolMessage) and t.tool_call_id in ids
            }
            return ids, answers
    return set(), {}


def step_policy(state: Any, gate: str) -> str | None:
    """The strictest policy recorded for ``gate``'s denials of the latest step (its handler's)."""
    if not isinstance(state, Mapping) or not isinstance(state.get("messages"), list):
        return None
    ids, _ = _latest_step(state["messages"])
    policies = [
        d.get("policy")
        for d in _records(state, "denials")
        if d.get("gate") == gate and d.get("tool_call_id") in ids and d.get("policy") in POLICIES
    ]
    return max(policies, key=POLICIES.index) if policies else None


@dataclass(frozen=True)
class Asked:
    """An escalation pending in a node's input: where it was raised, and when."""

    tool_call_id: str
    """The escalated call."""
    escalation_id: str | None
    """Its identity."""
    gate: str | None
    """Its gate."""
    raised_in: Any
    """The span context of the engine call that was denied (``None`` if not recorded)."""
    at: str | None
    """When the denial came back (ISO 8601; ``None`` if not recorded)."""


def asked_escalations(state: Any, gate: str) -> list[Asked]:
    """The latest step's escalations of ``gate`` that wait for an operator, as raised.

    Read from the denied call's answer in the state (its ``ToolMessage.artifact``, where
    :meth:`EngineConnection.call_tool` keeps the trace context and the time, key
    :data:`~algenta_graph.telemetry.names.TRACE_ARTIFACT_KEY`).
    """
    if not isinstance(state, Mapping) or not isinstance(state.get("messages"), list):
        return []
    ids, answers = _latest_step(state["messages"])
    answered = {o.get("tool_call_id") for o in _records(state, "operator_decisions")}
    out: list[Asked] = []
    for d in _records(state, "denials"):
        call_id = d.get("tool_call_id")
        if d.get("gate") != gate or d.get("policy") != "escalate" or call_id in answered:
            continue
        if not isinstance(call_id, str) or call_id not in ids:
            continue
        message = answers.get(call_id)
        artifact = message.artifact if message is not None else None
        stamp = artifact.get(names.TRACE_ARTIFACT_KEY) if isinstance(artifact, Mapping) else None
        stamp = stamp if isinstance(stamp, Mapping) else {}
        out.append(
            Asked(
                call_id,
                _text(d.get("escalation_id")),
                _text(d.get("gate")),
                span_context_of(stamp.get("traceparent")),
                _text(d.get("asked_at")) or _text(stamp.get("at")),
            )
        )
    return out


def seconds_between(start: str | None, end: str | None) -> float | None:
    """Seconds from one ISO 8601 time to another (``None`` when either is missing or bad).

    >>> seconds_between("2026-01-01T00:00:00+00:00", "2026-01-01T01:00:00+00:00")
    3600.0
    """
    if not start or not end:
        return None
    try:
        return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
    except (TypeError, ValueError):
        return None
