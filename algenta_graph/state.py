"""The governed graph's checkpointed state: its channels, and the reducer of its records.

Every value is JSON-serialisable (plain dicts, lists, strings, numbers), so a checkpointer and
the LangGraph server can store and return it unchanged. ``receipts``, ``denials``,
``operator_decisions`` and ``tool_calls`` (:data:`RECORD_FIELDS`) are **append-only**: their
reducer (:func:`append_records`) only ever appends, so no node (and no ``update_state`` call)
can rewrite or drop a recorded outcome. The graph writes an empty list to each of them on every
turn, so they exist (possibly empty) in every thread's state. The records' shapes and their
constructors are :mod:`algenta_graph.records` and :mod:`algenta_graph.operator_records`
(``docs/ARCHITECTURE.md``, "State" and "Outcomes").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from langchain_core.messages import AnyMessage
from langgraph.graph.message import add_messages
from langgraph.managed import RemainingSteps
from typing_extensions import TypedDict

# the record shapes are annotations of GovernedState, which LangGraph resolves in this module
from algenta_graph.operator_records import OperatorDecisionRecord
from algenta_graph.records import DenialRecord, ReceiptRecord, ToolCallRecord

__all__ = [
    "RECORD_FIELDS",
    "GovernedInput",
    "GovernedState",
    "append_records",
]

RECORD_FIELDS: tuple[str, ...] = ("receipts", "denials", "operator_decisions", "tool_calls")
"""The governed record fields of the state, in chain order: written only by the graph's nodes."""


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
    """The turn's new messages."""


class GovernedState(TypedDict):
    """The governed graph's state."""

    messages: Annotated[list[AnyMessage], add_messages]
    """The conversation (``add_messages``)."""
    selected_tools: list[str]
    """Tool names the model is bound to this turn (retrieval top-K plus ``search_tools`` hits),
    in rank order; ``search_tools`` itself is always bound too."""
    receipts: Annotated[list[ReceiptRecord], append_records]
    """Every receipt of ``execute_decision`` (append-only)."""
    denials: Annotated[list[DenialRecord], append_records]
    """Every named-gate denial (append-only)."""
    operator_decisions: Annotated[list[OperatorDecisionRecord], append_records]
    """Every operator decision, approved or declined (append-only)."""
    tool_calls: Annotated[list[ToolCallRecord], append_records]
    """Every call a graph-side gate rule names that was let through to run (append-only)."""
    remaining_steps: RemainingSteps
    """Managed by LangGraph (the run's ``recursion_limit``): the model node ends the run cleanly
    before the limit instead of raising ``GraphRecursionError``."""
