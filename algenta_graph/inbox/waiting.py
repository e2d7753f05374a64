"""The inbox's queue: the escalations the signed-in operator may answer, newest first.

Read from the threads the operator may read (only their metadata and pending interrupts: the
queue is polled every few seconds), kept to the gates the operator's roles answer, each with its
age and whether its deadline passed, and a count per gate. It shows one escalation's detail
nowhere (:mod:`algenta_graph.inbox.escalation`) and sends nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from langgraph_sdk.client import LangGraphClient

from algenta_graph.governance.escalations import is_overdue, parse_time
from algenta_graph.inbox.escalation import escalation_items
from algenta_graph.inbox.queries import readable_threads
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
    args: dict[str, Any]
    asked_at: str | None
    expires_at: str | None
    age: str
    overdue: bool

    @property
    def args_text(self) -> str:
        """The call's arguments as JSON text (escaped by the template)."""
        return json.dumps(self.args, sort_keys=True, default=str)


def _interrupts(thread: Mapping[str, Any]) -> list[dict[str, Any]]:
    found = thread.get("interrupts") or {}
    return [dict(i) for group in found.values() for i in group or () if isinstance(i, Mapping)]


async def queue(
    client: LangGraphClient, roles: Sequence[str], now: datetime
) -> tuple[list[QueueEntry], dict[str, int]]:
    """The escalations ``roles`` may answer, newest first, and their count per gate."""
    gates = operator_gates(roles)
    entries: list[QueueEntry] = []
    # not the values (the messages): the queue is polled every few seconds
    shown = ("thread_id", "metadata", "interrupts")
    for thread in await readable_threads(client, shown):
        owner = (thread.get("metadata") or {}).get(OWNER_KEY)
        for interrupt in _interrupts(thread):
            for item in escalation_items(interrupt.get("value")):
                if item.get("gate") not in gates:
                    continue
                entries.append(
                    QueueEntry(
                        thread_id=str(thread["thread_id"]),
                        owner=str(owner) if owner else None,
                        gate=str(item["gate"]),
                        escalation_id=str(item.get("escalation_id")),
                        decision_id=item.get("decision_id"),
                        tool=item.get("tool"),
                        code=item.get("code"),
                        message=item.get("message"),
                        args=dict(item.get("args") or {}),
                        asked_at=item.get("asked_at"),
                        expires_at=item.get("expires_at"),
                        age=_age(item.get("asked_at"), now),
                        overdue=is_overdue(item.get("expires_at"), now),
                    )
                )
    entries.sort(key=lambda e: e.asked_at or "", reverse=True)
    counts: dict[str, int] = {}
    for entry in entries:
        counts[entry.gate] = counts.get(entry.gate, 0) + 1
    return entries, counts
