"""One escalation as the inbox reads it: the pending interrupt that asks about it, or its answer.

:func:`escalation` finds the thread's pending interrupt whose escalations include the one asked
for, with what the page shows beside it (each item's denial, the thread's records in chain
order, whether a reason is required); once answered, :func:`decision_of` is the operator
decision recorded for it. Reading only: the answer sent is :mod:`algenta_graph.inbox.resume`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from langgraph_sdk.client import LangGraphClient

from algenta_graph.audit.chain import records_in_order
from algenta_graph.inbox.queries import DEFAULT_ASSISTANT, get_thread, thread_state
from algenta_graph.serving.tokens import OWNER_KEY

__all__ = ["EscalationView", "decision_of", "escalation", "escalation_items"]


def escalation_items(value: Any) -> list[dict[str, Any]]:
    """The escalations an interrupt's value asks about (none when it is not an escalation)."""
    if not isinstance(value, Mapping):
        return []
    return [dict(i) for i in value.get("escalations") or () if isinstance(i, Mapping)]


def _requires_reason(schema: Any) -> bool:
    """Whether an interrupt's ``response_schema`` requires a ``message`` on an approval."""
    if not isinstance(schema, Mapping):
        return False
    defs = schema.get("$defs") or {}
    return any(
        "message" in (d.get("required") or ())
        for name, d in defs.items()
        if isinstance(d, Mapping) and name in ("ApproveDecision", "RejectDecision", "EditDecision")
    )


@dataclass
class EscalationView:
    """An interrupt that asks about an escalation, as the signed-in operator may read it."""

    thread_id: str
    owner: str | None
    assistant_id: str
    interrupt_id: str | None
    value: dict[str, Any]
    items: list[dict[str, Any]]
    per_call: bool
    require_reason: bool
    pending_interrupts: int
    denials: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The denial record of each item, by escalation id."""
    records: list[tuple[str, Mapping[str, Any]]] = field(default_factory=list)
    """The thread's records, in chain order."""

    @property
    def digest(self) -> str:
        """The digest that binds the whole request."""
        return str(self.value.get("digest") or "")


async def escalation(
    client: LangGraphClient, thread_id: str, escalation_id: str
) -> tuple[EscalationView | None, dict[str, Any]]:
    """The pending interrupt of ``thread_id`` that asks about ``escalation_id`` (or ``None``).

    Also returns the thread's state (its records), so a page can say what became of an
    escalation that no longer waits.
    """
    thread = await get_thread(client, thread_id)
    state = await thread_state(client, thread_id)
    values = state.get("values") or {}
    metadata = thread.get("metadata") or {}
    pending = [i for t in state.get("tasks") or () for i in t.get("interrupts") or ()]
    for interrupt in pending:
        value = interrupt.get("value")
        items = escalation_items(value)
        if not any(i.get("escalation_id") == escalation_id for i in items):
            continue
        denials = {
            str(d.get("escalation_id")): dict(d)
            for d in values.get("denials") or ()
            if isinstance(d, Mapping)
        }
        return (
            EscalationView(
                thread_id=thread_id,
                owner=metadata.get(OWNER_KEY),
                assistant_id=str(
                    metadata.get("assistant_id") or metadata.get("graph_id") or DEFAULT_ASSISTANT
                ),
                interrupt_id=interrupt.get("id"),
                value=dict(value),
                items=items,
                per_call=(value or {}).get("type") == "tool_approval",
                require_reason=_requires_reason(interrupt.get("response_schema")),
                pending_interrupts=len(pending),
                denials={i["escalation_id"]: denials.get(i["escalation_id"], {}) for i in items},
                records=records_in_order(values),
            ),
            state,
        )
    return None, state


def decision_of(values: Mapping[str, Any], escalation_id: str) -> dict[str, Any] | None:
    """The operator decision recorded for ``escalation_id``, if any."""
    for record in values.get("operator_decisions") or ():
        if isinstance(record, Mapping) and record.get("escalation_id") == escalation_id:
            return dict(record)
    return None
