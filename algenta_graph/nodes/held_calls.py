"""Running a held call once an operator approves it: exactly once, or honestly unknown.

A call a graph-side gate held (``approval``, or a ``budget`` / ``arguments`` denial escalated by
policy) runs only when an operator's answer approves it, and only once, whichever process,
thread copy or resume completes that answer (``docs/ARCHITECTURE.md``, invariants 12 and 16).
An extra server's tool has no engine idempotency to lean on, so the run is **written ahead** in
the escalation claim store (:mod:`algenta_graph.governance.claims`, next to the checkpoints):

1. ``held-result:<escalation>`` already there: the call ran; its recorded outcome is returned
   (a checkpoint lost after the call, a copy of the thread): nothing runs again;
2. ``held-start:<escalation>`` is inserted (insert-if-absent: atomic across processes); one
   already there means an earlier attempt started the call and died before its result was
   written: it is **not** run again, its outcome is ``unknown`` and the operator is told
   (invariant 8: what may have run counts as run);
3. the call runs; its outcome is written as ``held-result:<escalation>``, then returned.

A call a gate blocks at approval time (``refused``: a budget the calls beside it spent while it
waited) is not run: its ``failed`` outcome is written in step 3's place, so that answer, too,
is decided once.

Example (in a denial handler, with the escalation's claim store)::

    outcome = await run_held(conn, store, denial, args, operator="ana")
    outcome.result  # "executed" | "failed" | "unknown"
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

from algenta_graph.connection.client import EngineClient
from algenta_graph.errors import AlgentaGraphError, ToolNotInProfileError
from algenta_graph.governance.claims import ClaimStore, new_claim, release
from algenta_graph.nodes.steps import plain_content
from algenta_graph.records import escalation_id_of, now_iso

__all__ = ["HeldOutcome", "result_key", "run_held", "start_key"]

HeldResult = Literal["executed", "failed", "unknown"]


@dataclass(frozen=True)
class HeldOutcome:
    """What came of running a held call."""

    result: HeldResult
    """``executed`` (it ran and answered), ``failed`` (it answered with an error, or certainly
    did not run), ``unknown`` (it may have run; it is not run again)."""
    content: str
    """The tool's answer (text), or why there is none."""
    status: Literal["success", "error"]
    """The answer's status, for the model's tool message."""
    started_at: str | None = None
    """When the run was started (the write-ahead marker's time)."""
    refused: bool = False
    """It was not run because a gate blocked it when it was approved (nothing was sent)."""


def start_key(escalation_id: str) -> str:
    """The write-ahead key of a held call's start.

    >>> start_key("esc_1")
    'held-start:esc_1'
    """
    return f"held-start:{escalation_id}"


def result_key(escalation_id: str) -> str:
    """The key of a held call's recorded outcome.

    >>> result_key("esc_1")
    'held-result:esc_1'
    """
    return f"held-result:{escalation_id}"


async def run_held(
    conn: EngineClient,
    store: ClaimStore,
    denial: Mapping[str, Any],
    args: Mapping[str, Any],
    *,
    operator: str,
    refused: str | None = None,
) -> HeldOutcome:
    """Run the held call of ``denial`` with ``args``, at most once (see the module docs).

    Args:
        conn: the engine connection (every catalog tool is called through it).
        store: the escalation claim store the write-ahead markers live in.
        denial: the held call's denial record (its ``catalog_name`` and ``escalation_id``).
        args: the arguments to run it with (the held ones, or an operator's edit, scrubbed).
        operator: who approved it (kept with the start marker).
        refused: why a gate blocks it now, if one does: unless an earlier attempt ran or
            started it, it is not run and its ``failed`` outcome (``refused``) says why.

    Returns:
        The outcome; ``unknown`` when an earlier attempt started it and left no result.
    """
    escalation = escalation_id_of(denial)
    done = await store.get(result_key(escalation))
    if done is not None:
        return _outcome(done.answer)
    name = str(denial.get("catalog_name") or denial.get("tool") or "")
    if refused is not None and await store.get(start_key(escalation)) is None:
        return await _record(
            store, escalation, HeldOutcome("failed", refused, "error", refused=True)
        )
    marker = new_claim(
        start_key(escalation), {"operator": operator, "tool": name, "started_at": now_iso()}
    )
    try:
        current = await store.claim(marker)
    finally:
        release(marker)  # a marker, not a lease: nothing keeps it alive
    if current.token != marker.token:
        started = str(current.answer.get("started_at") or "?")
        return HeldOutcome(
            "unknown",
            f"the approved call of {name} was started at {started} by an earlier attempt that "
            "stopped before its result was recorded; it may have run, so it was NOT run again: "
            "an operator must check the tool's own records",
            "error",
            started,
        )
    started_at = str(marker.answer["started_at"])
    try:
        message = await conn.call_tool(name, dict(args), tool_call_id=f"held:{escalation}")
    except ToolNotInProfileError as exc:  # refused before anything was sent
        outcome = HeldOutcome("failed", f"Error: {exc}", "error", started_at)
    except AlgentaGraphError as exc:  # it may have been sent: counts as run, outcome unknown
        outcome = HeldOutcome(
            "unknown", f"the call may have run, its answer was lost: {exc}", "error", started_at
        )
    else:
        content = plain_content(message.content)
        text = content if isinstance(content, str) else json.dumps(content)
        failed = message.status == "error"
        outcome = HeldOutcome(
            "failed" if failed else "executed",
            text,
            "error" if failed else "success",
            started_at,
        )
    return await _record(store, escalation, outcome)


async def _record(store: ClaimStore, escalation: str, outcome: HeldOutcome) -> HeldOutcome:
    """Write ``outcome`` as the held call's result (insert-if-absent) and return it."""
    written = new_claim(result_key(escalation), asdict(outcome))
    try:
        await store.claim(written)
    finally:
        release(written)
    return outcome


def _outcome(recorded: Mapping[str, Any]) -> HeldOutcome:
    result = recorded.get("result")
    status = recorded.get("status")
    return HeldOutcome(
        result if result in ("executed", "failed", "unknown") else "unknown",
        str(recorded.get("content", "")),
        status if status in ("success", "error") else "error",
        recorded.get("started_at"),
        recorded.get("refused") is True,
    )
