"""What waits for an operator in a checkpoint store: each gate's escalations, their deadline, state.

:func:`list_waiting` reads each thread's latest checkpoint and its pending interrupt (no engine,
no graph needed) and each escalation's claim in the ledger (nothing is written there): an
escalation ``waiting``, ``overdue`` (past its deadline, nothing claimed), ``expired`` (its expiry
claimed, recorded in the thread when it next runs) or ``answered`` (an answer claimed). Read by
``algenta-graph escalations`` and by the served graph's deadline watcher.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from algenta_graph.ledger import Ledger

__all__ = ["Waiting", "list_waiting"]


@dataclass(frozen=True)
class Waiting:
    """One gate's escalations that wait for an operator on one thread."""

    thread_id: str
    gate: str
    decision_ids: list[str | None]
    """The engine decision of each escalation (``None`` for a call a graph-side gate held)."""
    calls: list[str | None]
    """The held call of each escalation, ``server.tool`` (``None`` for an engine decision)."""
    escalation_ids: list[str]
    asked_at: str | None
    expires_at: str | None
    digest: str | None
    interrupt_id: str | None
    state: str
    """``waiting``, ``overdue`` (past its deadline), ``expired`` (its expiry is recorded) or
    ``answered`` (an answer is taken, recorded when the thread next runs)."""

    def age(self, now: datetime) -> str:
        """How long it has waited, ``1h02m03s``."""
        from algenta_graph.governance.escalations import parse_time

        if not self.asked_at:
            return "?"
        seconds = max(0, int((now - parse_time(self.asked_at)).total_seconds()))
        hours, rest = divmod(seconds, 3600)
        minutes, seconds = divmod(rest, 60)
        return f"{hours}h{minutes:02d}m{seconds:02d}s" if hours else f"{minutes}m{seconds:02d}s"


def _interrupt_items(pending_writes: Sequence[Any]) -> dict[str, Mapping[str, Any]]:
    """The escalation items of a checkpoint's pending interrupts, by escalation id."""
    found: dict[str, Mapping[str, Any]] = {}
    for write in pending_writes or ():
        if len(write) < 3 or write[1] != "__interrupt__":
            continue
        values = write[2] if isinstance(write[2], list | tuple) else [write[2]]
        for interrupt in values:
            value = getattr(interrupt, "value", interrupt)
            if not isinstance(value, Mapping):
                continue
            for item in value.get("escalations") or ():
                if isinstance(item, Mapping) and item.get("escalation_id"):
                    found[str(item["escalation_id"])] = {
                        **item,
                        "interrupt_id": getattr(interrupt, "id", item.get("interrupt_id")),
                    }
    return found


async def list_waiting(
    saver: Any, ledger: Ledger, now: datetime, thread: str | None = None
) -> list[Waiting]:
    """Every gate's escalations that wait for an operator, per thread, oldest first.

    Each one's state reads its claim in ``ledger`` (nothing is written there).
    """
    from algenta_graph.governance.escalations import is_overdue
    from algenta_graph.governance.gates import GATE_NAMES
    from algenta_graph.ledger import ClaimAnswer, escalation_key
    from algenta_graph.nodes.questions import open_denials
    from algenta_graph.records import escalation_id_of
    from algenta_graph.serving.checkpoint_reader import aread_latest

    out: list[Waiting] = []
    for tid, cp in (await aread_latest(saver, thread)).items():
        if "denials" not in cp.values:
            continue  # not a thread of ours
        tup = await saver.aget_tuple({"configurable": {"thread_id": tid, "checkpoint_ns": ""}})
        items = _interrupt_items(tup.pending_writes if tup is not None else ())
        for gate in GATE_NAMES:
            group = [d for d in open_denials(cp.values, gate) if d.get("policy") == "escalate"]
            if not group:
                continue
            ids = [escalation_id_of(d) for d in group]
            shown = [items.get(i, {}) for i in ids]
            deadlines = sorted(str(s["expires_at"]) for s in shown if s.get("expires_at"))
            expires_at = deadlines[0] if deadlines else None
            claim = await ledger.peek(escalation_key(ids), ClaimAnswer)
            if claim is not None:
                verdicts = {d.verdict for d in claim.value.decisions}
                state = "expired" if verdicts == {"expired"} else "answered"
            else:
                state = "overdue" if is_overdue(expires_at, now) else "waiting"
            out.append(
                Waiting(
                    thread_id=tid,
                    gate=gate,
                    decision_ids=[d.get("decision_id") for d in group],
                    calls=[f"{d['server']}.{d['tool']}" if d.get("tool") else None for d in group],
                    escalation_ids=ids,
                    asked_at=min(
                        (str(d["raised_at"]) for d in group if d.get("raised_at")), default=None
                    ),
                    expires_at=expires_at,
                    digest=shown[0].get("digest") if len(shown) == 1 else None,
                    interrupt_id=shown[0].get("interrupt_id"),
                    state=state,
                )
            )
    return sorted(out, key=lambda w: (w.asked_at or "", w.thread_id, w.gate))
