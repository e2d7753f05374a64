"""Every governed call written ahead: sent at most once, its outcome reused, or honestly unknown.

A call a graph-side rule names (a budget, an argument rule, an approval) is marked in the ledger
(:mod:`algenta_graph.ledger`, every process serving the graph shares it) **before** it is sent,
under the call's own identity (:func:`~algenta_graph.ledger.keys.step_call_id` for a call its rules
let through, :func:`~algenta_graph.ledger.keys.held_call_id` for an approved held call: the same in
a copy of the thread, another worker, a new task after a cancel; another thread's nowhere), and
its outcome is recorded before it is returned (``docs/ARCHITECTURE.md``, invariant 18). An extra
server's tool has no engine idempotency to lean on; this is its idempotency:

1. a recorded outcome: the call ran; that outcome is returned (a checkpoint lost after the call,
   a copy of the thread, a second completion): nothing is sent again;
2. the start is inserted (insert-if-absent: atomic across processes); one already there means an
   earlier attempt started the call and stopped (cancelled, killed, another worker still on it)
   before its outcome was written: it is **not** sent again, its outcome is ``unknown``
   (invariant 8: what may have run counts as run) and the model and the operator are told;
3. the call is sent; its outcome is written, then returned.

A call a gate blocks when it is to run (``refused``: a budget the calls beside a held call spent
while it waited) is not sent: its ``failed`` outcome is written in step 3's place, so that
decision, too, is taken once. The engine's own ``execute_decision`` is not written ahead here:
its execution log is its write-ahead (the graph's idempotency key and tag, read back by
:mod:`algenta_graph.nodes.recovery`).

Example (an approved held call, in a denial handler)::

    ran = await run_once(ledger, held_call_id("esc_1"), "delete_customer", send, operator="ana")
    ran.outcome.result  # "executed" | "failed" | "unknown"
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import ToolMessage

from algenta_graph.errors import AlgentaGraphError, ToolNotInProfileError
from algenta_graph.ledger import (
    CallOutcome,
    CallStart,
    Ledger,
    call_result_key,
    call_start_key,
    new_entry,
    release,
)
from algenta_graph.nodes.steps import plain_content
from algenta_graph.records import now_iso

__all__ = ["Ran", "earlier_outcome", "outcome_fields", "run_once", "unknown_outcome"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Ran:
    """What came of running a governed call once."""

    outcome: CallOutcome
    """Its recorded outcome."""
    answer: ToolMessage | None = None
    """The tool's own answer, when this attempt sent it (``None``: reused, refused, unknown)."""


def unknown_outcome(tool: str, start: CallStart | None) -> CallOutcome:
    """The outcome of a call an earlier attempt started and left without a result."""
    started = start.started_at if start is not None else "?"
    what = "approved call" if start is not None and start.operator else "call"
    return CallOutcome(
        result="unknown",
        content=(
            f"the {what} of {tool} was started at {started} by an earlier attempt that stopped "
            "before its result was recorded; it may have run, so it was NOT run again: an "
            "operator must check the tool's own records"
        ),
        status="error",
        started_at=start.started_at if start is not None else None,
    )


async def earlier_outcome(ledger: Ledger, identity: str, tool: str) -> CallOutcome | None:
    """The outcome of an earlier attempt at the call ``identity``, if one started it.

    Its recorded outcome, or ``unknown`` when it was started and left without one; ``None``
    when no attempt started it (it has not been sent).
    """
    done = await ledger.get(call_result_key(identity), CallOutcome)
    if done is not None:
        return done.value
    start = await ledger.get(call_start_key(identity), CallStart)
    return None if start is None else unknown_outcome(tool, start.value)


async def run_once(
    ledger: Ledger,
    identity: str,
    tool: str,
    send: Callable[[], Awaitable[ToolMessage]],
    *,
    operator: str | None = None,
    thread_id: str | None = None,
    refused: str | None = None,
) -> Ran:
    """Send the call ``identity`` at most once (see the module docs).

    Args:
        ledger: the graph's ledger, where its start and outcome are written.
        identity: the call's identity (:mod:`algenta_graph.ledger.keys`).
        tool: the tool, by its catalog name (what the start and the messages name).
        send: sends it (the tool's answer); called at most once, never after a start.
        operator: who approved it, for a held call (kept with the start).
        thread_id: the thread sending it (kept with the start).
        refused: why a gate blocks it now, if one does: unless an earlier attempt ran or
            started it, it is not sent and its ``failed`` outcome (``refused``) says why.

    Returns:
        Its outcome, and the tool's answer when this attempt sent it.
    """
    earlier = await earlier_outcome(ledger, identity, tool)
    if earlier is not None:
        return Ran(earlier)
    if refused is not None:
        return Ran(
            await _record(
                ledger,
                identity,
                CallOutcome(result="failed", content=refused, status="error", refused=True),
            )
        )
    start = new_entry(
        call_start_key(identity),
        CallStart(tool=tool, started_at=now_iso(), operator=operator, thread_id=thread_id),
    )
    try:
        current = await ledger.insert(start)
    finally:
        release(start)  # a marker, not a lease: nothing keeps it alive
    if current.token != start.token:  # another attempt started it meanwhile
        return Ran(unknown_outcome(tool, current.value))
    started_at = start.value.started_at
    answer: ToolMessage | None = None
    try:
        answer = await send()
    except ToolNotInProfileError as exc:  # refused before anything was sent
        outcome = CallOutcome(
            result="failed", content=f"Error: {exc}", status="error", started_at=started_at
        )
    except AlgentaGraphError as exc:  # it may have been sent: counts as run, outcome unknown
        outcome = CallOutcome(
            result="unknown",
            content=f"the call may have run, its answer was lost: {exc}",
            status="error",
            started_at=started_at,
        )
    else:
        content = plain_content(answer.content)
        failed = answer.status == "error"
        outcome = CallOutcome(
            result="failed" if failed else "executed",
            content=content if isinstance(content, str) else json.dumps(content),
            status="error" if failed else "success",
            started_at=started_at,
        )
    if outcome.result == "unknown":
        logger.warning(
            "governed call %s (%s): outcome unknown: %s", tool, identity, outcome.content
        )
    return Ran(await _record(ledger, identity, outcome), answer)


async def _record(ledger: Ledger, identity: str, outcome: CallOutcome) -> CallOutcome:
    """Write ``outcome`` as the call's result (insert-if-absent); the outcome in force."""
    written = new_entry(call_result_key(identity), outcome)
    try:
        current = await ledger.insert(written)
    finally:
        release(written)
    return current.value


def outcome_fields(outcome: CallOutcome) -> dict[str, Any]:
    """``outcome`` as an operator decision record keeps it (without its ``kind``)."""
    return outcome.model_dump(exclude={"kind"})
