"""Two-person approval on the node's side: each approval counted once, in the ledger.

A gate with a quorum (:attr:`~algenta_graph.governance.escalations.EscalationSettings.quorum`)
runs nothing until that many distinct operators approved the same digest. The approvals live in
the graph's ledger, where every worker serving the graph sees them, as
:class:`~algenta_graph.ledger.ApprovalMark` entries in numbered slots
(:func:`~algenta_graph.ledger.approval_key`): :func:`count_approval` walks the slots in order and
takes the first free one (insert-if-absent) unless an earlier one is already the operator's, so
an operator counts once, whichever worker, thread or token their approvals arrive through, and
two approvals racing in two workers take two slots. An approval given now (not one a resumed
node replays) that finds its operator's own in a slot is refused by name
(:class:`~algenta_graph.errors.ApprovalAlreadyCounted`): the same identity approving at the same
moment in two workers, copies or tokens. :func:`approvals` reads them without
writing. Whoever's approval fills the last slot claims the escalation's one answer
(:mod:`algenta_graph.nodes.claiming`), so what is approved runs once.
"""

from __future__ import annotations

from collections.abc import Sequence

from algenta_graph.errors import ApprovalAlreadyCounted
from algenta_graph.governance.escalations import already_approved
from algenta_graph.ledger import ApprovalMark, Ledger, approval_key, new_entry, release

__all__ = ["approvals", "approvers", "count_approval"]


async def approvals(ledger: Ledger, key: str, digest: str, quorum: int) -> list[ApprovalMark]:
    """The approvals of ``digest`` counted so far for the answer ``key``, in slot order."""
    found: list[ApprovalMark] = []
    for slot in range(1, quorum + 1):
        entry = await ledger.get(approval_key(key, digest, slot), ApprovalMark)
        if entry is None:
            break
        found.append(entry.value)
    return found


async def count_approval(
    ledger: Ledger, key: str, quorum: int, mark: ApprovalMark, *, replayed: bool
) -> list[ApprovalMark]:
    """Count ``mark`` toward the quorum of ``key`` (once per operator); every approval counted.

    The slots of ``mark.digest`` are walked in order: a free one is taken (insert-if-absent;
    losing it to another operator moves on to the next), one already the operator's stops the
    walk (counted before: not again). The approvals after the operator's are read too, so the
    count is every slot filled by then. ``replayed``: whether ``mark`` is an approval a resumed
    node replays (counted before, maybe by this very walk: found again, not refused).

    Raises:
        ApprovalAlreadyCounted: ``mark`` is an approval given now (``replayed`` false), and a
            slot already holds its operator's (another approval of theirs, counted first).
    """
    found: list[ApprovalMark] = []
    counted = False
    for slot in range(1, quorum + 1):
        slot_key = approval_key(key, mark.digest, slot)
        entry = await ledger.get(slot_key, ApprovalMark)
        taken = False
        if entry is None:
            if counted:
                break
            mine = new_entry(slot_key, mark)
            entry = await ledger.insert(mine)
            taken = entry.token == mine.token
            if taken:
                await ledger.finish(mine)
            release(mine)
        theirs = entry.value.operator == mark.operator
        if theirs and not (taken or replayed):
            raise ApprovalAlreadyCounted(
                already_approved(mark.operator, approvers([*found, entry.value]), quorum)
            )
        found.append(entry.value)
        counted = counted or theirs
    return found


def approvers(marks: Sequence[ApprovalMark]) -> list[str]:
    """Who approved, in the order counted."""
    return [m.operator for m in marks]
