"""Exactly one answer per escalation, on the node's side: claim it, adopt it, apply it held.

The claim store is :mod:`algenta_graph.governance.claims` (an atomic claim under the
escalation's own identity, next to the checkpoints). This module is how a denial handler uses
it (``docs/ARCHITECTURE.md``, invariant 12): :func:`claim_answer` claims a fresh answer, or
yields to the claim already in force; :func:`adopt` completes a claim in force in its operator's
name (a finished one again, idempotently; an abandoned one taken over), or raises
:class:`~algenta_graph.errors.EscalationAlreadyDecided` for one still being applied elsewhere;
:func:`apply_claimed` applies an answer while keeping its claim alive, then marks it finished.
Not what an answer does (:mod:`algenta_graph.nodes.applying`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from algenta_graph.errors import EscalationAlreadyDecided
from algenta_graph.governance.claims import HEARTBEAT_SECONDS, Claim, ClaimStore, new_claim, release

__all__ = ["adopt", "apply_claimed", "claim_answer"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


async def claim_answer(store: ClaimStore, key: str, answer: dict[str, Any]) -> Claim:
    """Claim ``key`` for ``answer``; or the claim already in force, to be completed."""
    mine = new_claim(key, answer)
    current = await store.claim(mine)
    if current.token == mine.token:
        return mine
    release(mine)
    return await adopt(store, current)


async def adopt(store: ClaimStore, current: Claim) -> Claim:
    """The claim in force, to be completed in its operator's name; or who decided.

    A finished claim is completed again (its checkpoint may be lost, or this is a copy of
    its thread): idempotent, as the override finds its own execution at the engine and sends
    nothing. An abandoned one is taken over by compare-and-set.

    Raises:
        EscalationAlreadyDecided: a live claimant is still applying it elsewhere (it names its
            operator).
    """
    if current.done:
        return current
    mine = new_claim(current.key, current.answer)
    if current.abandoned() and await store.take_over(current, mine):
        # the claimant is gone before finishing: complete its answer, in its name
        return Claim(current.key, current.answer, mine.token, mine.host, mine.pid, mine.at)
    release(mine)
    raise EscalationAlreadyDecided(current)


async def apply_claimed(store: ClaimStore, claim: Claim, apply: Callable[[], Awaitable[T]]) -> T:
    """Run ``apply``, keeping ``claim`` alive meanwhile; then mark it finished.

    A run cancelled (or killed) here leaves the claim unfinished and let go, so the next run
    on this escalation, wherever it runs, takes it over and completes it.
    """
    heartbeat = asyncio.ensure_future(_keep_alive(store, claim))
    try:
        update = await apply()
        await store.finish(claim)
    finally:
        heartbeat.cancel()
        release(claim)
    return update


async def _keep_alive(store: ClaimStore, claim: Claim) -> None:
    """Refresh ``claim`` until cancelled.

    Every :data:`~algenta_graph.governance.claims.HEARTBEAT_SECONDS`; a missed refresh is logged
    (it only shortens the lease).
    """
    while True:
        await asyncio.sleep(HEARTBEAT_SECONDS)
        try:
            await store.refresh(claim)
        except Exception as exc:  # a missed refresh only shortens the lease; never fatal
            logger.warning("escalation claim %s: refresh failed: %s", claim.key, exc)
