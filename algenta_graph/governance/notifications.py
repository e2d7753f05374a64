"""Notifying someone that an escalation waits: once per escalation, whatever runs it.

A denial handler notifies before it interrupts (:func:`notify_once`). The node runs again on
every resume, every new message and in every worker that meets the thread, so a notice is
**claimed** first, under its escalation's identity, in the graph's ledger with the answers
(:mod:`algenta_graph.ledger`, shared by every process serving the graph): one process sends it,
and marks it sent. A hook that fails (an exception, a non-2xx answer, a refused connection) is
logged and never blocks the escalation; its notice is let go unsent, and the next handler that
meets the escalation sends it again, so it is sent once when the hook works again. A hook that
times out may have been reached: its notice counts as sent (logged), never repeated.

Two hooks exist: a Python callable (``EscalationSettings.hook``) and a URL
(``EscalationSettings.notify_url``: a JSON ``POST`` signed the Standard Webhooks way, its id,
its timestamp and its body under the signature, so a receiver refuses an old notice replayed:
:mod:`algenta_graph.governance.notice_signing`).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections.abc import Mapping
from typing import Any

import httpx

from algenta_graph.governance.escalations import EscalationSettings, WebhookNotify
from algenta_graph.governance.notice_signing import signed_headers, webhook_id
from algenta_graph.ledger import Entry, Ledger, NoticeMark, new_entry, release

__all__ = [
    "DEADLINE_WARNING",
    "RAISED",
    "mark_once",
    "notice_key",
    "notify_once",
    "post_notice",
]

logger = logging.getLogger(__name__)


class _Timeout(Exception):
    """A hook attempt timed out: it may have been delivered."""


RAISED = "escalation.raised"
"""A notice's ``event`` when it says an escalation was raised (its notice has no ``event``)."""
DEADLINE_WARNING = "escalation.deadline_warning"
"""A notice's ``event`` when it warns that an escalation's deadline is near (``warn_before``)."""


def notice_key(escalation_id: str, event: str = RAISED) -> str:
    """The claim key of an escalation's notice of ``event``.

    >>> notice_key("esc_1"), notice_key("esc_1", DEADLINE_WARNING)
    ('notice:esc_1', 'notice:escalation.deadline_warning:esc_1')
    """
    return f"notice:{escalation_id}" if event == RAISED else f"notice:{event}:{escalation_id}"


def notice_id(notice: Mapping[str, Any]) -> str:
    """The ``webhook-id`` of ``notice``: the same on every attempt, another for each event.

    >>> notice_id({"escalation_id": "esc_1"})
    'esc_1'
    >>> notice_id({"escalation_id": "esc_1", "event": DEADLINE_WARNING})[:4]
    'esc_'
    """
    escalation = str(notice.get("escalation_id"))
    event = str(notice.get("event") or RAISED)
    return webhook_id(escalation if event == RAISED else f"{escalation}.{event}")


async def mark_once(store: Ledger, key: str, escalation_id: str) -> Entry[NoticeMark] | None:
    """Claim ``key``'s mark for this process: the claim, or ``None`` when another holds it.

    Another process's mark is taken over when it was abandoned unfinished (its process gone, or
    not refreshed for the lease); a finished one is never taken. :meth:`Ledger.finish` the claim
    once what it stands for is done, :func:`~algenta_graph.ledger.release` it in any case.
    """
    current = await store.get(key, NoticeMark)
    mine = new_entry(key, NoticeMark(escalation_id=escalation_id))
    if current is None:
        current = await store.insert(mine)
    won = current.token == mine.token
    if not won and current.abandoned():
        # its claimant failed (or died) before it was done: do it now
        won = await store.take_over(current, mine)
    if not won:
        release(mine)
        return None
    return mine


async def post_notice(target: WebhookNotify, notice: Mapping[str, Any]) -> None:
    """``POST`` ``notice`` as JSON to ``target.url``, signed; retried on failures.

    Every attempt is signed when it is sent (its own ``webhook-timestamp``), under the one
    ``webhook-id`` of the escalation.

    Raises:
        RuntimeError: every attempt failed (non-2xx, or the connection was refused); the last
            failure is named.
        _Timeout: an attempt timed out (the receiver may have it).
    """
    body = json.dumps(dict(notice), sort_keys=True, default=str).encode()
    message_id = notice_id(notice)
    secret = target.secret.get_secret_value()
    problem = "no attempt"
    async with httpx.AsyncClient(timeout=target.timeout_seconds) as client:
        for attempt in range(target.attempts):
            headers = {"Content-Type": "application/json"}
            headers.update(signed_headers(secret, message_id, body))
            try:
                response = await client.post(str(target.url), content=body, headers=headers)
            except httpx.TimeoutException as exc:
                timeout = f"{target.url}: timed out after {target.timeout_seconds:g}s"
                raise _Timeout(timeout) from exc
            except httpx.HTTPError as exc:
                problem = f"{type(exc).__name__}: {exc}"
            else:
                if response.is_success:
                    return
                problem = f"HTTP {response.status_code}"
            if attempt + 1 < target.attempts:
                await asyncio.sleep(0.05 * 2**attempt)
    raise RuntimeError(f"{target.url}: {problem} after {target.attempts} attempt(s)")


async def _call_hook(settings: EscalationSettings, notice: Mapping[str, Any]) -> None:
    if settings.hook is not None:
        result = settings.hook(dict(notice))
        if inspect.isawaitable(result):
            await result
    if settings.notify_url is not None:
        await post_notice(settings.notify_url, notice)


async def notify_once(
    store: Ledger, settings: EscalationSettings, notice: Mapping[str, Any]
) -> bool:
    """Send ``notice`` through the configured hooks unless it was sent (or is being sent).

    One notice per escalation and ``event`` (:data:`RAISED` when the notice names none, or
    :data:`DEADLINE_WARNING`): each is marked under its own key and posted under its own
    ``webhook-id``.

    Returns whether this call sent it. Never raises: a failing hook is logged, and its notice is
    left unsent for the next handler that meets the escalation.
    """
    if settings.hook is None and settings.notify_url is None:
        return False
    escalation = str(notice.get("escalation_id"))
    key = notice_key(escalation, str(notice.get("event") or RAISED))
    try:
        mine = await mark_once(store, key, escalation)
        if mine is None:
            return False
    except Exception as exc:  # the claim store is unavailable: never block the escalation
        logger.warning("escalation %s: notice not sent: %s", notice.get("escalation_id"), exc)
        return False
    try:
        await _call_hook(settings, notice)
    except _Timeout as exc:
        logger.warning(
            "escalation %s: notice %s (counted as sent: it may have arrived)",
            notice.get("escalation_id"),
            exc,
        )
    except Exception as exc:  # a failing hook never blocks the escalation
        logger.warning(
            "escalation %s: notification hook failed (sent again by the next handler that meets "
            "it): %s",
            notice.get("escalation_id"),
            exc,
        )
        release(mine)
        return False
    try:
        await store.finish(mine)
    finally:
        release(mine)
    return True
