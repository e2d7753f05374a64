"""Exactly one answer per escalation, on the node's side: claim it, adopt it, apply it held.

The claims live in the graph's ledger (:mod:`algenta_graph.ledger`: an atomic entry under the
escalation's own identity, shared by every process serving the graph). This module is how a
denial handler uses it (``docs/ARCHITECTURE.md``, invariant 12): :func:`claim_answer` claims a
fresh answer, or yields to the claim already in force; :func:`adopt` completes a claim in force
in its operator's name (a finished one again, idempotently; an abandoned one taken over), or
raises :class:`~algenta_graph.errors.EscalationAlreadyDecided` for one still being applied
elsewhere; :func:`apply_claimed` applies an answer while keeping its claim alive, then marks it
finished.

**The loser is told.** A resume carries an answer; when the handler that meets its escalations
completes another answer instead (given before it, in this thread, a copy or another worker),
it says so in the run's :class:`AnswerReport` (:func:`report_lost`), which the compiled graph
put in the run's config (:mod:`algenta_graph.graph.resumes`): once the run has written the
winning answer's records, the resume is refused with
:class:`~algenta_graph.errors.EscalationAlreadyDecided`.
Not what an answer does (:mod:`algenta_graph.nodes.applying`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig

from algenta_graph.errors import EscalationAlreadyDecided
from algenta_graph.ledger import (
    HEARTBEAT_SECONDS,
    ClaimAnswer,
    Entry,
    Ledger,
    new_entry,
    release,
)

__all__ = [
    "ANSWER_REPORT",
    "AnswerReport",
    "Claim",
    "adopt",
    "answer_report",
    "apply_claimed",
    "claim_answer",
    "report_lost",
    "run_id_of",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

Claim = Entry[ClaimAnswer]
"""An escalation's answer, as the ledger holds it."""

ANSWER_REPORT = "__algenta_answer_report"
"""The run's ``configurable`` key of its :class:`AnswerReport` (``__``: never in checkpoint
metadata)."""


@dataclass
class AnswerReport:
    """What became of the answer a resume carries, as the handlers that met it report."""

    pending: frozenset[str]
    """The escalations waiting when the resume arrived (the ones it may answer)."""
    lost_to: Claim | None = field(default=None)
    """The answer that took effect instead of the resume's, if one did."""


def run_id_of(config: RunnableConfig | None) -> str | None:
    """The served run ``config`` belongs to (the LangGraph server's ``run_id``), if any."""
    found = ((config or {}).get("configurable") or {}).get("run_id")
    return str(found) if found else None


def answer_report(config: RunnableConfig | None) -> AnswerReport | None:
    """The run's answer report (``None``: the run carries no answer)."""
    found = ((config or {}).get("configurable") or {}).get(ANSWER_REPORT)
    return found if isinstance(found, AnswerReport) else None


def report_lost(config: RunnableConfig, escalation_ids: Iterable[str], claim: Claim) -> None:
    """The run's answer (if it carries one for these escalations) lost to ``claim``.

    Not when ``claim`` is this very run's answer (a served run retried by its server).
    """
    report = answer_report(config)
    if report is None or report.lost_to is not None or not report.pending & set(escalation_ids):
        return
    run = run_id_of(config)
    if run is None or claim.value.run_id != run:
        report.lost_to = claim


async def claim_answer(ledger: Ledger, key: str, answer: ClaimAnswer) -> tuple[Claim, bool]:
    """Claim ``key`` for ``answer``: (the claim in force, whether it is this answer's).

    Another answer's claim in force is adopted (:func:`adopt`), to be completed.
    """
    mine = new_entry(key, answer)
    current = await ledger.insert(mine)
    if current.token == mine.token:
        return mine, True
    release(mine)
    return await adopt(ledger, current), False


async def adopt(ledger: Ledger, current: Claim) -> Claim:
    """The claim in force, to be completed in its operator's name; or who decided.

    A finished claim is completed again (its checkpoint may be lost, or this is a copy of
    its thread): idempotent, as the override finds its own execution at the engine and a held
    call its recorded outcome, and nothing is sent twice. An abandoned one is taken over by
    compare-and-set.

    Raises:
        EscalationAlreadyDecided: a live claimant is still applying it elsewhere (it names its
            operator).
    """
    if current.done:
        return current
    mine = new_entry(current.key, current.value)
    if current.abandoned() and await ledger.take_over(current, mine):
        # the claimant is gone before finishing: complete its answer, in its name
        return current.adopted_by(mine)
    release(mine)
    raise EscalationAlreadyDecided(current)


async def apply_claimed(ledger: Ledger, claim: Claim, apply: Callable[[], Awaitable[T]]) -> T:
    """Run ``apply``, keeping ``claim`` alive meanwhile; then mark it finished.

    A run cancelled (or killed) here leaves the claim unfinished and let go, so the next run
    on this escalation, wherever it runs, takes it over and completes it.
    """
    heartbeat = asyncio.ensure_future(_keep_alive(ledger, claim))
    try:
        update = await apply()
        await ledger.finish(claim)
    finally:
        heartbeat.cancel()
        release(claim)
    return update


async def _keep_alive(ledger: Ledger, claim: Entry[Any]) -> None:
    """Refresh ``claim`` until cancelled.

    Every :data:`~algenta_graph.ledger.HEARTBEAT_SECONDS`; a missed refresh is logged (it only
    shortens the lease).
    """
    while True:
        await asyncio.sleep(HEARTBEAT_SECONDS)
        try:
            await ledger.refresh(claim)
        except Exception as exc:  # a missed refresh only shortens the lease; never fatal
            logger.warning("escalation claim %s: refresh failed: %s", claim.key, exc)
