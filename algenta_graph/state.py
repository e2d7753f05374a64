"""The governed graph's checkpointed state and its reducers.

Every value is JSON-serialisable (plain dicts, lists, strings, numbers), so a checkpointer and
the LangGraph server can store and return it unchanged. ``receipts``, ``denials`` and
``operator_decisions`` are **append-only**: their reducer only ever appends, so no node (and no
``update_state`` call) can rewrite or drop a recorded outcome. The graph writes an empty list to
each of them on every turn, so they exist (possibly empty) in every thread's state.

Record shapes (typed dicts, see ``docs/ARCHITECTURE.md`` "Outcomes"):

- :class:`ReceiptRecord`: the fields of :class:`~algenta_graph.outcomes.ExecutionReceipt`
  (``decision_id``, ``webhook_url``, ``execution_status``, ``response_code``,
  ``safety_overridden``, ...) plus ``tool_call_id`` and ``source``: ``"model"`` (the model's
  call), ``"operator"`` (an operator override, with ``operator``) or ``"recovered"`` (a delivery
  the checkpoint missed, read back from the engine).
- :class:`DenialRecord`: the fields of :class:`~algenta_graph.outcomes.ExecutionDenial`
  (``gate``, ``code``, ``message``, ``override_hint``) plus ``decision_id``, ``webhook_url``,
  ``tool_call_id``, ``source`` (``"model"``: the engine denied the model's call;
  ``"operator"``: the engine denied an operator override; ``"thread_receipts"``: the thread had
  already executed the decision, so the graph did not send it again) and, for a model's call,
  ``policy``: the policy the denial was raised under. A denial with ``policy == "escalate"``
  and no operator decision for its ``tool_call_id`` is a **pending escalation**: a resume
  completes it from the state alone, whatever context the resume carries.
- :class:`OperatorDecisionRecord`: :class:`OperatorDecision` dumped to JSON.

Every record also carries ``seq``, ``prev`` and ``hash``: its link in the thread's
tamper-evident chain (:mod:`algenta_graph.chain`), set by the node that wrote it.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Annotated, Any, Literal

from langchain_core.messages import AnyMessage
from langgraph.graph.message import add_messages
from langgraph.managed import RemainingSteps
from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypedDict

__all__ = [
    "DenialRecord",
    "GovernedInput",
    "GovernedState",
    "OperatorDecision",
    "OperatorDecisionRecord",
    "ReceiptRecord",
    "append_records",
    "escalation_id_of",
    "new_escalation_id",
]

RecordSource = Literal["model", "operator", "recovered", "thread_receipts"]


class ReceiptRecord(TypedDict, total=False):
    """A receipt in state: an ``ExecutionReceipt`` dump plus where it came from."""

    kind: Literal["receipt"]
    decision_id: str
    webhook_url: str
    execution_status: str
    response_code: int | None
    executed_at: str
    policy_snapshot_id: str | None
    schema_snapshot_id: str | None
    manifest_version: str | None
    payload_summary: dict[str, Any]
    safety_overridden: bool
    tool_call_id: str | None
    source: RecordSource
    operator: str
    seq: int
    prev: str
    hash: str


class DenialRecord(TypedDict, total=False):
    """A named-gate denial in state: an ``ExecutionDenial`` dump plus its call and policy."""

    kind: Literal["denial"]
    gate: str
    code: str
    message: str
    override_hint: str | None
    status_code: int | None
    decision_id: str | None
    webhook_url: str | None
    tool_call_id: str | None
    source: RecordSource
    policy: Literal["report", "escalate", "halt"]
    timeout_seconds: float
    escalation_id: str
    """An escalated denial's own identity (``esc_<hex>``), given when it is raised: copies of
    the thread, later tasks and other processes all answer *this* escalation, exactly once."""
    seq: int
    prev: str
    hash: str


class OperatorDecisionRecord(TypedDict, total=False):
    """An operator decision in state (:class:`OperatorDecision` dumped to JSON)."""

    operator: str
    reason: str
    action: Literal["override", "decline"]
    gate: str
    decision_id: str | None
    override_flag: str | None
    result: Literal["receipt", "failed", "denied", "declined"]
    outcome: dict[str, Any] | None
    tool_call_id: str | None
    time: str
    escalation_id: str | None
    answered_in_thread: str | None
    seq: int
    prev: str
    hash: str


def new_escalation_id() -> str:
    """A fresh escalation identity, given to an escalated denial when it is raised."""
    return "esc_" + uuid.uuid4().hex


def escalation_id_of(denial: Mapping[str, Any]) -> str:
    """The identity of the escalation a denial record raised.

    Its ``escalation_id``; for a record written before escalations had one, an identity derived
    from what the record holds as raised (gate, decision, tool call and its chain hash), which a
    copy of the thread shares.

    >>> escalation_id_of({"escalation_id": "esc_1"})
    'esc_1'
    >>> escalation_id_of({"gate": "confidence", "tool_call_id": "c1", "hash": "ab"})[:4]
    'esc_'
    """
    given = denial.get("escalation_id")
    if isinstance(given, str) and given:
        return given
    raw = "|".join(
        str(denial.get(k)) for k in ("gate", "decision_id", "tool_call_id", "hash", "seq")
    )
    return "esc_" + hashlib.sha256(raw.encode()).hexdigest()[:32]


def append_records(
    left: Sequence[Mapping[str, Any]] | None,
    right: Sequence[Mapping[str, Any]] | Mapping[str, Any] | None,
) -> list[dict[str, Any]]:
    """Append-only reducer: ``left`` followed by ``right`` (a record or a list of records).

    >>> append_records([{"a": 1}], {"b": 2})
    [{'a': 1}, {'b': 2}]
    >>> append_records(None, [])
    []
    """
    out = [dict(r) for r in (left or [])]
    if right is None:
        return out
    if isinstance(right, Mapping):
        right = [right]
    for record in right:
        if not isinstance(record, Mapping):
            raise TypeError(f"a state record must be a dict, not {type(record).__name__}")
        out.append(dict(record))
    return out


class GovernedInput(TypedDict):
    """What a run accepts as input: new messages only (outcomes are never taken from input)."""

    messages: Annotated[list[AnyMessage], add_messages]


class GovernedState(TypedDict):
    """The governed graph's state.

    - ``messages``: the conversation (``add_messages``).
    - ``selected_tools``: tool names the model is bound to this turn (retrieval top-K plus
      ``search_tools`` hits), in rank order; ``search_tools`` itself is always bound too.
    - ``receipts``, ``denials``, ``operator_decisions``: append-only records (module docs).
    - ``remaining_steps``: managed by LangGraph (the run's ``recursion_limit``); the model node
      ends the run cleanly before the limit instead of raising ``GraphRecursionError``.
    """

    messages: Annotated[list[AnyMessage], add_messages]
    selected_tools: list[str]
    receipts: Annotated[list[ReceiptRecord], append_records]
    denials: Annotated[list[DenialRecord], append_records]
    operator_decisions: Annotated[list[OperatorDecisionRecord], append_records]
    remaining_steps: RemainingSteps


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


class OperatorDecision(BaseModel):
    """One human operator decision on an escalated denial, approved or declined.

    ``result`` says what came of it: ``"receipt"`` (the override executed and was delivered),
    ``"failed"`` (it executed but delivery failed, or the engine answered unrecognisably),
    ``"denied"`` (the engine denied even the override; ``outcome`` holds the denial) or
    ``"declined"`` (the operator declined; nothing was executed).
    """

    model_config = ConfigDict(extra="forbid")

    operator: str
    reason: str
    action: Literal["override", "decline"]
    gate: str
    decision_id: str | None
    override_flag: str | None = None
    result: Literal["receipt", "failed", "denied", "declined"]
    outcome: dict[str, Any] | None = None
    tool_call_id: str | None = None
    time: str = Field(default_factory=_now)
    escalation_id: str | None = None
    """The escalation answered (its denial's ``escalation_id``)."""
    answered_in_thread: str | None = None
    """Where the answer was given, when not in this thread (a copy completing its original's
    answer, or the original completing a copy's)."""
    seq: int | None = None
    """The record's place in the thread's audit chain (:mod:`algenta_graph.chain`)."""
    prev: str | None = None
    hash: str | None = None
