"""The inbox's queue: the escalations the signed-in operator may answer, newest first.

Read from the threads the operator may read (only their metadata and pending interrupts: the
queue is polled every few seconds), kept to the gates the operator's roles answer, each with its
age and whether its deadline passed, and a count per gate; each says in words what it is about
and what approving it does (:mod:`algenta_graph.inbox.wording`; an engine decision's action as the
engine reports it, :func:`~algenta_graph.inbox.engine_reads.decision_actions`). It shows one
escalation's detail nowhere (:mod:`algenta_graph.inbox.escalation`) and sends nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from langgraph_sdk.client import LangGraphClient

from algenta_graph.governance.escalations import is_overdue, parse_time
from algenta_graph.inbox.engine_reads import decision_actions
from algenta_graph.inbox.escalation import escalation_items
from algenta_graph.inbox.queries import readable_threads
from algenta_graph.inbox.wording import answer_effects, item_subject
from algenta_graph.serving.tokens import OWNER_KEY, operator_gates

__all__ = ["QueueEntry", "queue"]


def _age(asked_at: str | None, now: datetime) -> str:
    if not asked_at:
        return "?"
    try:
        seconds = max(0, int((now - parse_time(asked_at)).total_seconds()))
    except ValueError:
        return "?"
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{seconds:02d}s" if hours else f"{minutes}m{seconds:02d}s"


@dataclass(frozen=True)
class QueueEntry:
    """One escalation waiting for the signed-in operator."""

    thread_id: str
    owner: str | None
    gate: str
    escalation_id: str
    decision_id: str | None
    """The engine decision escalated (``None`` for a call a graph-side gate held)."""
    tool: str | None
    """The held call's tool, ``server.tool`` (``None`` for an engine decision)."""
    code: str | None
    message: str | None
    asked_at: str | None
    expires_at: str | None
    age: str
    overdue: bool
    action: str | None
    """The action the engine decision decides, when the engine said (``None`` for a held call)."""
    about: str
    """What it is about, in words: the held call, or the decision and its action."""
    approving: str
    """What approving it does, in words (or that approving is not accepted)."""


def _interrupts(thread: Mapping[str, Any]) -> list[dict[str, Any]]:
    found = thread.get("interrupts") or {}
    return [dict(i) for group in found.values() for i in group or () if isinstance(i, Mapping)]


def _entry(
    thread_id: str,
    owner: str | None,
    item: dict[str, Any],
    actions: Mapping[str, str],
    now: datetime,
) -> QueueEntry:
    action = actions.get(item["decision_id"]) if item.get("decision_id") else None
    overdue = is_overdue(item.get("expires_at"), now)
    effects = answer_effects(item, action, overdue=overdue)
    return QueueEntry(
        thread_id=thread_id,
        owner=owner,
        gate=str(item["gate"]),
        escalation_id=str(item.get("escalation_id")),
        decision_id=item.get("decision_id"),
        tool=item.get("tool"),
        code=item.get("code"),
        message=item.get("message"),
        asked_at=item.get("asked_at"),
        expires_at=item.get("expires_at"),
        age=_age(item.get("asked_at"), now),
        overdue=overdue,
        action=action,
        about=item_subject(item, action),
        approving=effects.get("approve", "approving is not accepted for this escalation"),
    )


async def queue(
    client: LangGraphClient, roles: Sequence[str], now: datetime
) -> tuple[list[QueueEntry], dict[str, int]]:
    """The escalations ``roles`` may answer, newest first, and their count per gate."""
    gates = operator_gates(roles)
    waiting: list[tuple[str, str | None, dict[str, Any]]] = []
    # not the values (the messages): the queue is polled every few seconds
    shown = ("thread_id", "metadata", "interrupts")
    for thread in await readable_threads(client, shown):
        owner = (thread.get("metadata") or {}).get(OWNER_KEY)
        for interrupt in _interrupts(thread):
            for item in escalation_items(interrupt.get("value")):
                if item.get("gate") in gates:
                    waiting.append((str(thread["thread_id"]), str(owner) if owner else None, item))
    actions = await decision_actions(
        i["decision_id"] for _, _, i in waiting if isinstance(i.get("decision_id"), str)
    )
    entries = [_entry(thread, owner, item, actions, now) for thread, owner, item in waiting]
    entries.sort(key=lambda e: e.asked_at or "", reverse=True)
    counts: dict[str, int] = {}
    for entry in entries:
        counts[entry.gate] = counts.get(entry.gate, 0) + 1
    return entries, counts
