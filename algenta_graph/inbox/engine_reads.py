"""The decision as the engine reports it (``get_decision``), and the action each decision decides.

Read over the served graph's own engine connection settings (``ALGENTA_BASE_URL`` and the rest
of the configuration), read-only: never with the operator credential. One connection per event
loop, opened on first use and closed with the inbox (:func:`close_engines`). The escalation
page shows :func:`get_decision`'s answer; every page names a decision with the action it decides
(:func:`decision_actions`), kept once read (a logged decision's action never changes), and asked
again no sooner than :data:`RETRY_SECONDS` after the engine could not answer, so a queue that
refreshes itself every few seconds does not wait on an engine that is down. It reads nothing of
the graph's API (:mod:`algenta_graph.inbox.queries`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["LOOKUP_SECONDS", "RETRY_SECONDS", "close_engines", "decision_actions", "get_decision"]

_log = logging.getLogger("algenta_graph.inbox")
_ENGINES: dict[int, tuple[asyncio.AbstractEventLoop, Any]] = {}
_OPENING: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Lock]] = {}

LOOKUP_SECONDS = 5.0
"""How long :func:`decision_actions` waits for the engine before it names a decision without
its action."""
RETRY_SECONDS = 30.0
"""How long a decision the engine could not be asked about is not asked about again."""
_KEPT = 4096
"""How many decisions' actions are kept (the oldest go first)."""
_ACTIONS: dict[str, str] = {}
_MISSED: dict[str, float] = {}


async def _engine() -> Any:
    """This loop's engine connection, opened once (concurrent first uses wait for it)."""
    loop = asyncio.get_running_loop()
    opening = _OPENING.get(id(loop))
    if opening is None or opening[0] is not loop:
        opening = _OPENING[id(loop)] = (loop, asyncio.Lock())
    async with opening[1]:
        held = _ENGINES.get(id(loop))
        if held is None or held[0] is not loop:
            from algenta_graph.config import resolve_config
            from algenta_graph.graph.connecting import open_engine_connection
            from algenta_graph.serving.server import ServerSettings

            settings = await asyncio.to_thread(ServerSettings.from_env)
            resolved = await asyncio.to_thread(resolve_config, settings.config)
            conn = await open_engine_connection(
                settings.config,
                base_url=settings.config.base_url,
                api_key=resolved.api_key or "",
                operator_api_key="",  # read-only: never the operator credential
                profile=settings.config.profile,
                extra_servers=None,
            )
            held = _ENGINES[id(loop)] = (loop, conn)
        return held[1]


async def get_decision(decision_id: str) -> dict[str, Any]:
    """The engine's record of ``decision_id`` (``get_decision``), over the served settings.

    Raises:
        Exception: the engine could not be reached or refused (the page shows the message).
    """
    answer = dict(await (await _engine()).get_decision(decision_id))
    _keep(decision_id, answer)
    return answer


def _keep(decision_id: str, answer: Mapping[str, Any]) -> None:
    """Keep the action ``get_decision`` answered for ``decision_id``, if it names one."""
    decision = answer.get("decision")
    action = decision.get("chosen_action") if isinstance(decision, Mapping) else None
    if isinstance(action, str) and action:
        if len(_ACTIONS) >= _KEPT:
            _ACTIONS.pop(next(iter(_ACTIONS)))
        _ACTIONS[decision_id] = action
        _MISSED.pop(decision_id, None)


async def _ask(decision_id: str) -> None:
    try:
        await asyncio.wait_for(get_decision(decision_id), LOOKUP_SECONDS)
    except Exception as exc:  # the page names the decision without its action
        _MISSED[decision_id] = time.monotonic()
        _log.warning("the engine could not say what decision %s decides: %s", decision_id, exc)


async def decision_actions(decision_ids: Iterable[str]) -> dict[str, str]:
    """The action each of ``decision_ids`` decides, as the engine reports it.

    A decision the engine could not be asked about (unreachable, too slow, an error) is left
    out, and not asked about again for :data:`RETRY_SECONDS`.
    """
    now = time.monotonic()
    wanted = set(decision_ids)
    missing = [
        d
        for d in sorted(wanted)
        if d not in _ACTIONS and now - _MISSED.get(d, -RETRY_SECONDS) >= RETRY_SECONDS
    ]
    if missing:
        await asyncio.gather(*(_ask(d) for d in missing))
    return {d: _ACTIONS[d] for d in wanted if d in _ACTIONS}


async def close_engines() -> None:
    """Close the engine connections this process opened for ``get_decision``."""
    loop = asyncio.get_running_loop()
    held = _ENGINES.pop(id(loop), None)
    _OPENING.pop(id(loop), None)
    if held is not None and held[0] is loop:
        await held[1].aclose()
