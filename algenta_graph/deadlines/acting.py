"""Acting on deadlines: an overdue escalation's expiry, and the warning before its deadline.

- :func:`expire_overdue`: every escalation past its deadline is claimed in the ledger as a
  decline with the verdict ``expired``, its one answer (an answer given later meets the claim
  and executes nothing; one already answered is left alone). The thread records it in its hash
  chain the next time it runs. ``algenta-graph escalations --expire`` and the served graph's
  watcher both call it.
- :func:`warn_due`: every escalation still waiting whose deadline is nearer than its gate's
  ``warn_before`` gets one warning notice, through the notification path of every notice
  (:func:`~algenta_graph.governance.notifications.notify_once`: marked in the ledger, sent once
  whatever process sends it, Standard Webhooks signed).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from algenta_graph.deadlines.waiting import Waiting, list_waiting

if TYPE_CHECKING:
    from algenta_graph.governance.escalations import EscalationSettings
    from algenta_graph.ledger import Ledger

__all__ = ["expire_overdue", "warn_due", "warning_notice"]


async def expire_overdue(
    saver: Any,
    ledger: Ledger,
    now: datetime,
    *,
    operator: str,
    thread: str | None = None,
) -> list[Waiting]:
    """Record the expiry of every escalation past its deadline; the ones expired now.

    Each is claimed in ``ledger`` as a decline with the verdict ``expired`` in ``operator``'s
    name (its one answer: an answer given later meets the claim and executes nothing); one
    already answered is left alone.
    """
    from algenta_graph.ledger import (
        AnswerDecision,
        ClaimAnswer,
        escalation_key,
        new_entry,
        release,
    )

    expired: list[Waiting] = []
    for waiting in await list_waiting(saver, ledger, now, thread):
        if waiting.state != "overdue":
            continue
        decision = AnswerDecision(
            action="decline",
            type="reject",
            verdict="expired",
            reason=f"the escalation expired at {waiting.expires_at}; expired by {operator}",
            digest=waiting.digest,
            interrupt_id=waiting.interrupt_id,
            asked_at=waiting.asked_at,
            expires_at=waiting.expires_at,
        )
        answer = ClaimAnswer(
            operator=operator,
            roles=["system"],
            decided_at=now.isoformat(),
            decisions=[decision for _ in waiting.escalation_ids],
            thread_id=waiting.thread_id,
        )
        mine = new_entry(escalation_key(waiting.escalation_ids), answer)
        try:
            current = await ledger.insert(mine)
            if current.token == mine.token:
                await ledger.finish(mine)  # nothing to execute: the answer is complete
                expired.append(waiting)
        finally:
            release(mine)
    return expired


def warning_notice(waiting: Waiting, index: int, warn_before: float) -> dict[str, Any]:
    """The warning notice of ``waiting``'s escalation number ``index``.

    The fields of the notice sent when it was raised that the listing knows, with ``event``
    (:data:`~algenta_graph.governance.notifications.DEADLINE_WARNING`) and ``warn_before``
    (seconds).
    """
    from algenta_graph.governance.notifications import DEADLINE_WARNING

    return {
        "event": DEADLINE_WARNING,
        "escalation_id": waiting.escalation_ids[index],
        "thread_id": waiting.thread_id,
        "gate": waiting.gate,
        "decision_id": waiting.decision_ids[index],
        "call": waiting.calls[index],
        "asked_at": waiting.asked_at,
        "expires_at": waiting.expires_at,
        "warn_before": warn_before,
    }


async def warn_due(
    saver: Any, ledger: Ledger, settings: EscalationSettings, now: datetime
) -> list[str]:
    """Warn once of every escalation that waits and whose deadline is within ``warn_before``.

    Returns the escalations this call warned of (another process may have warned of others).
    An escalation already past its deadline, or answered, gets no warning. Never raises for a
    failing hook (:func:`~algenta_graph.governance.notifications.notify_once`).
    """
    from algenta_graph.governance.escalations import parse_time
    from algenta_graph.governance.notifications import notify_once

    if not settings.warn_before:
        return []
    warned: list[str] = []
    for waiting in await list_waiting(saver, ledger, now):
        lead = settings.warn_before_for(waiting.gate)
        if waiting.state != "waiting" or lead is None or waiting.expires_at is None:
            continue
        if now < parse_time(waiting.expires_at) - lead:
            continue
        for index, escalation in enumerate(waiting.escalation_ids):
            notice = warning_notice(waiting, index, lead.total_seconds())
            if await notify_once(ledger, settings, notice):
                warned.append(escalation)
    return warned
