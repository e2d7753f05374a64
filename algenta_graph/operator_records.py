"""The operator decision record: one shape, validated, with its one constructor.

:class:`OperatorDecisionRecord` is what the state holds for every operator decision on an
escalation, approved or declined (every field documented); :class:`OperatorDecision` is its
validated form; :func:`operator_decision_record` is the one way nodes write one. It says who
answered (identity and roles), what they were shown (``digest``), when the escalation was asked
and when it was decided, and the outcome (``verdict``): ``docs/ARCHITECTURE.md``, invariant 15.
The records of executions (receipts, denials, gated calls) are :mod:`algenta_graph.records`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import NotRequired, TypedDict

from algenta_graph.records import DecisionResult, OperatorAction, OperatorVerdict, now_iso

__all__ = ["OperatorDecision", "OperatorDecisionRecord", "operator_decision_record"]


class OperatorDecisionRecord(TypedDict):
    """An operator decision in state (:class:`OperatorDecision` dumped to JSON).

    Written by :func:`operator_decision_record`. It says who answered (identity and roles),
    what they were shown (``digest``), when the escalation was asked and when it was decided,
    and the outcome (``verdict``): ``docs/ARCHITECTURE.md``, invariant 15.
    """

    operator: str
    """Who decided: the authenticated identity when served with auth."""
    reason: str | None
    """Why, in the operator's words (``None`` when no reason was given); for ``responded``, the
    text the model was given; for ``expired``, the deadline that passed."""
    action: OperatorAction
    """``override`` (sent on the operator path) or ``decline`` (nothing sent)."""
    gate: str
    """The gate whose denial was escalated."""
    decision_id: str | None
    """The decision escalated."""
    override_flag: str | None
    """The flag an override sends (``force`` or ``override_safety``)."""
    result: DecisionResult
    """``receipt``, ``failed``, ``denied`` (the engine denied the override too) or ``declined``."""
    outcome: dict[str, Any] | None
    """The override's outcome as the engine answered it (a dumped receipt, denial or failure)."""
    tool_call_id: str | None
    """The escalated tool call."""
    time: str
    """When the decision was recorded (ISO 8601, UTC)."""
    escalation_id: str | None
    """The escalation answered (its denial's ``escalation_id``)."""
    answered_in_thread: str | None
    """Where the answer was given, when not in this thread."""
    verdict: NotRequired[OperatorVerdict]
    """The operator's outcome (:data:`OperatorVerdict`)."""
    roles: NotRequired[list[str]]
    """The operator's roles when it answered (the served graph's authenticated roles; empty
    when the graph runs without auth)."""
    digest: NotRequired[str | None]
    """The digest of what the operator was shown (``sha256:<hex>``, the escalation's
    ``digest``): the answer took effect on exactly that."""
    interrupt_id: NotRequired[str | None]
    """The id of the interrupt that asked (LangGraph's ``Interrupt.id``)."""
    asked_at: NotRequired[str | None]
    """When the escalation was raised (its denial's ``raised_at``)."""
    decided_at: NotRequired[str | None]
    """When the answer was given (claimed: the moment it became the one answer)."""
    expires_at: NotRequired[str | None]
    """The escalation's deadline, when its gate has one (``expires_after``)."""
    original_args: NotRequired[dict[str, Any] | None]
    """For ``modified``: the reviewed call's arguments."""
    edited_args: NotRequired[dict[str, Any] | None]
    """For ``modified``: the arguments the operator sent instead (scrubbed like a model call)."""
    tool: NotRequired[str | None]
    """For a held call (graph-side gates): the tool's real MCP name, ``server.name``."""
    args_digest: NotRequired[str | None]
    """For a held call: the digest of the arguments it ran with (the edited ones, if edited)."""
    approvers: NotRequired[list[str]]
    """Under a quorum: who had approved, in the order counted (the answer that ran it lists
    every approver, ``operator`` the last; a reject, those it overruled)."""
    seq: NotRequired[int]
    """The record's place in the thread's audit chain."""
    prev: NotRequired[str]
    """The ``hash`` of the record before it."""
    hash: NotRequired[str]
    """This record's link hash."""


def operator_decision_record(
    *,
    operator: str,
    reason: str | None,
    action: OperatorAction,
    gate: str,
    decision_id: str | None,
    result: DecisionResult,
    override_flag: str | None = None,
    outcome: Mapping[str, Any] | None = None,
    tool_call_id: str | None = None,
    escalation_id: str | None = None,
    answered_in_thread: str | None = None,
    verdict: OperatorVerdict | None = None,
    roles: Sequence[str] = (),
    digest: str | None = None,
    interrupt_id: str | None = None,
    asked_at: str | None = None,
    decided_at: str | None = None,
    expires_at: str | None = None,
    original_args: Mapping[str, Any] | None = None,
    edited_args: Mapping[str, Any] | None = None,
    tool: str | None = None,
    args_digest: str | None = None,
    approvers: Sequence[str] = (),
) -> OperatorDecisionRecord:
    """The state record of one operator decision (validated by :class:`OperatorDecision`).

    ``verdict`` defaults to what ``action`` says (``overrode`` or ``declined``); ``tool`` and
    ``args_digest`` (a held call's) are in the record only with a ``tool``; ``approvers`` only
    under a quorum.

    Raises:
        pydantic.ValidationError: a field of the wrong type, naming it.
    """
    record = OperatorDecisionRecord(
        operator=operator,
        reason=reason,
        action=action,
        gate=gate,
        decision_id=decision_id,
        override_flag=override_flag,
        result=result,
        outcome=dict(outcome) if outcome is not None else None,
        tool_call_id=tool_call_id,
        time=now_iso(),
        escalation_id=escalation_id,
        answered_in_thread=answered_in_thread,
        verdict=verdict or ("overrode" if action == "override" else "declined"),
        roles=list(roles),
        digest=digest,
        interrupt_id=interrupt_id,
        asked_at=asked_at,
        decided_at=decided_at,
        expires_at=expires_at,
        original_args=dict(original_args) if original_args is not None else None,
        edited_args=dict(edited_args) if edited_args is not None else None,
    )
    if tool is not None:
        record["tool"] = tool
        record["args_digest"] = args_digest
    if approvers:
        record["approvers"] = list(approvers)
    OperatorDecision.model_validate(record)
    return record


class OperatorDecision(BaseModel):
    """One human operator decision on an escalated denial, approved or declined.

    The validated form of :class:`OperatorDecisionRecord`, whose fields it documents.
    """

    model_config = ConfigDict(extra="forbid")

    operator: str
    reason: str | None = None
    action: OperatorAction
    gate: str
    decision_id: str | None
    override_flag: str | None = None
    result: DecisionResult
    outcome: dict[str, Any] | None = None
    tool_call_id: str | None = None
    time: str = Field(default_factory=now_iso)
    escalation_id: str | None = None
    answered_in_thread: str | None = None
    verdict: OperatorVerdict | None = None
    roles: list[str] = Field(default_factory=list)
    digest: str | None = None
    interrupt_id: str | None = None
    asked_at: str | None = None
    decided_at: str | None = None
    expires_at: str | None = None
    original_args: dict[str, Any] | None = None
    edited_args: dict[str, Any] | None = None
    tool: str | None = None
    args_digest: str | None = None
    approvers: list[str] | None = None
    seq: int | None = None
    """The record's place in the thread's audit chain (:mod:`algenta_graph.audit.chain`)."""
    prev: str | None = None
    hash: str | None = None
