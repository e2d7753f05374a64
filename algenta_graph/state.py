"""The governed graph's checkpointed state and its reducers.

Every value is JSON-serialisable (plain dicts, lists, strings, numbers), so a checkpointer and
the LangGraph server can store and return it unchanged. ``receipts``, ``denials`` and
``operator_decisions`` are **append-only**: their reducer only ever appends, so no node (and no
``update_state`` call) can rewrite or drop a recorded outcome. The graph writes an empty list to
each of them on every turn, so they exist (possibly empty) in every thread's state.

Record shapes (dicts):

- receipt: the fields of :class:`~algenta_graph.outcomes.ExecutionReceipt` (``decision_id``,
  ``webhook_url``, ``execution_status``, ``response_code``, ``safety_overridden``, ...) plus
  ``tool_call_id`` and ``source``: ``"model"`` (the model's call), ``"operator"`` (an operator
  override) or ``"recovered"`` (a delivery the checkpoint missed, read back from the engine).
- denial: the fields of :class:`~algenta_graph.outcomes.ExecutionDenial` (``gate``, ``code``,
  ``message``, ``override_hint``) plus ``decision_id``, ``webhook_url``, ``tool_call_id`` and
  ``source``: ``"model"`` (the engine denied the model's call), ``"operator"`` (the engine
  denied an operator override) or ``"thread_receipts"`` (the thread had already delivered the
  decision, so the graph did not send it to the engine: an idempotency denial).
- operator decision: :class:`OperatorDecision` dumped to JSON.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Annotated, Any, Literal

from langchain_core.messages import AnyMessage
from langgraph.graph.message import add_messages
from pydantic import BaseModel, ConfigDict, Field, field_validator
from typing_extensions import TypedDict

__all__ = [
    "GovernedInput",
    "GovernedState",
    "OperatorDecision",
    "OperatorResume",
    "append_records",
]


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
    """

    messages: Annotated[list[AnyMessage], add_messages]
    selected_tools: list[str]
    receipts: Annotated[list[dict[str, Any]], append_records]
    denials: Annotated[list[dict[str, Any]], append_records]
    operator_decisions: Annotated[list[dict[str, Any]], append_records]


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


class OperatorResume(BaseModel):
    """The resume payload of an escalation: ``Command(resume={...})``.

    ``action`` is ``"override"`` or ``"decline"``; ``operator`` and ``reason`` are required,
    non-blank strings; any other key is an error (a typo must not silently approve).
    """

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
