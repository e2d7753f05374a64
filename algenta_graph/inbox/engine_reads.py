"""The decision as the engine reports it (``get_decision``), for the escalation page.

Read over the served graph's own engine connection settings (``ALGENTA_BASE_URL`` and the rest
of the configuration), read-only: never with the operator credential. One connection per event
loop, opened on first use and closed with the inbox (:func:`close_engines`). It reads nothing
of the graph's API (:mod:`algenta_graph.inbox.queries`).
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["close_engines", "get_decision"]

_ENGINES: dict[int, tuple[asyncio.AbstractEventLoop, Any]] = {}


async def get_decision(decision_id: str) -> dict[str, Any]:
    """The engine's record of ``decision_id`` (``get_decision``), over the served settings.

    Raises:
        Exception: the engine could not be reached or refused (the page shows the message).
    """
    loop = asyncio.get_running_loop()
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
    return dict(await held[1].get_decision(decision_id))


async def close_engines() -> None:
    """Close the engine connections this process opened for ``get_decision``."""
    loop = asyncio.get_running_loop()
    held = _ENGINES.pop(id(loop), None)
    if held is not None and held[0] is loop:
        await held[1].aclose()
