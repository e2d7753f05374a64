"""Opening the engine connection with its extra MCP servers, and probing those servers.

The engine is optional: ``base_url=False`` (the configuration's ``base_url = false``, the
factory's ``base_url=None``) opens the extra servers alone, and a graph with neither an engine
nor an extra server is refused before anything opens (:func:`check_tool_sources`,
:class:`~algenta_graph.errors.NoToolServers`).

An extra server that cannot be reached is left out with a warning naming its URL (the graph
serves the engine's tools and the other servers'), and the base tools it would have supplied
are dropped from ``always_include`` with a warning (:func:`unreachable_of` names them, for the
tool gates' optional servers). An unreachable engine is an error, and so is an extra server
whose name tool rules could not name (a dot: refused here as by the configuration file). The
probe (:func:`unreachable_servers`) connects once and keeps nothing (``config check``, the
served graph's start). This module neither builds nor compiles a graph
(:mod:`algenta_graph.graph.assembly`, :mod:`algenta_graph.graph.factory`).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import weakref
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from algenta_graph.config import AgentConfig
from algenta_graph.errors import EngineConnectionError, NoToolServers

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup

if TYPE_CHECKING:
    from algenta_graph.connection.engine import EngineConnection

__all__ = [
    "EngineURL",
    "check_tool_sources",
    "open_engine_connection",
    "unreachable_of",
    "unreachable_servers",
    "without_lost_tools",
]

logger = logging.getLogger(__name__)


def _server_url(spec: Mapping[str, Any]) -> str:
    if spec.get("url"):
        return str(spec["url"])
    command = [str(spec.get("command") or "")] + [str(a) for a in spec.get("args") or ()]
    return " ".join(command).strip() or "(no url)"


EngineURL = str | None | Literal[False]
"""Where the engine is: its MCP endpoint, ``None`` for the default (``ALGENTA_BASE_URL``, else
``http://localhost:8000/mcp``), or ``False``: there is no engine."""


def check_tool_sources(
    base_url: EngineURL, extra_servers: Mapping[str, Any] | None, *, no_engine: str
) -> None:
    """Refuse a graph with neither an engine nor an extra server (nothing would be served).

    Args:
        base_url: where the engine is (``False``: none).
        extra_servers: the extra servers.
        no_engine: how the caller said there is no engine (named in the message).

    Raises:
        NoToolServers: no engine and no extra server; nothing was opened.
    """
    if base_url is False and not extra_servers:
        raise NoToolServers(
            f"no tools to serve: {no_engine} says there is no Algenta engine, and there are no "
            "extra servers. Add your MCP servers (extra_servers={name: connection}, or "
            "[extra_servers.NAME] in the configuration), or name an engine (base_url = its MCP "
            "endpoint, e.g. http://localhost:8000/mcp)"
        )


_UNREACHABLE: weakref.WeakKeyDictionary[Any, dict[str, str]] = weakref.WeakKeyDictionary()
"""The extra servers a connection was opened without: ``{name: url}``."""


async def open_engine_connection(
    config: AgentConfig | None = None,
    *,
    base_url: EngineURL,
    api_key: str | None,
    operator_api_key: str | None,
    operator_key_is_agent_key: bool = False,
    profile: str,
    extra_servers: Mapping[str, Mapping[str, Any]] | None,
) -> EngineConnection:
    """Open the engine connection with its extra servers; an unreachable extra is left out.

    Each extra server that cannot be reached is logged as a warning naming it and its URL,
    and the connection opens without it (the engine's tools, and the other servers', are
    served). With ``base_url=False`` no engine is connected to: the extra servers are the
    catalog. The timeouts are the configuration's (``connect_timeout``, ``call_timeout``).

    Raises:
        NoToolServers: no engine (``base_url=False``) and no extra server; nothing connected.
        EngineConnectionError: the engine itself could not be reached; without an engine, no
            extra server could be.
        ConfigError: an extra server's name holds a dot (or another character a tool rule's
            ``server.name`` could not hold), before anything connects.
    """
    from algenta_graph.connection.catalog import check_server_names
    from algenta_graph.connection.engine import EngineConnection

    cfg = config or AgentConfig()
    check_tool_sources(base_url, extra_servers, no_engine="base_url=False")
    check_server_names(extra_servers or {})
    servers = {name: dict(spec) for name, spec in (extra_servers or {}).items()}
    lost: dict[str, str] = {}
    engine = base_url is not False
    while True:
        conn = EngineConnection(
            base_url if base_url is not False else None,
            engine=engine,
            api_key=api_key,
            operator_api_key=operator_api_key,
            operator_key_is_agent_key=operator_key_is_agent_key,
            profile=profile,
            extra_servers=servers,
            timeout=cfg.connect_timeout,
            call_timeout=cfg.call_timeout,
        )
        try:
            await conn.open()
        except EngineConnectionError as exc:
            # the URL an error names is the session's: the server's url, else its command
            failed = [
                n
                for n, spec in servers.items()
                if exc.url and exc.url == str(spec.get("url") or spec.get("command") or n)
            ]
            if not failed or exc.url == conn.url or (not engine and len(failed) == len(servers)):
                raise  # the engine, or without one every server: nothing left to serve
            for name in failed:
                url = _server_url(servers.pop(name))
                lost[name] = url
                logger.warning(
                    "extra MCP server %r at %s is unreachable (%s): the graph serves without "
                    "its tools",
                    name,
                    url,
                    exc,
                )
        else:
            if lost:
                _UNREACHABLE[conn] = lost
            return conn


def unreachable_of(connection: Any) -> frozenset[str]:
    """The extra servers ``connection`` was opened without (unreachable at start)."""
    try:
        return frozenset(_UNREACHABLE.get(connection) or ())
    except TypeError:  # a connection object that cannot be weakly referenced: none recorded
        return frozenset()


def without_lost_tools(names: Sequence[str], connection: Any) -> Sequence[str]:
    """``always_include`` without the tools of an extra server the connection had to leave out.

    A base tool missing because its server is unreachable is a warning (the graph serves
    without it); missing otherwise, it stays an error (:class:`GovernedCatalog` names it).
    """
    lost = _UNREACHABLE.get(connection)
    if not lost or isinstance(names, str):
        return names
    present = {t.name for t in connection.tools}
    kept = [n for n in names if n in present or n == "search_tools"]
    for name in names:
        if name not in kept:
            logger.warning(
                "always_include: %r is not bound: it is not in the catalog, and the extra "
                "server(s) %s could not be reached",
                name,
                ", ".join(f"{n!r} at {u}" for n, u in lost.items()),
            )
    return kept


async def unreachable_servers(
    extra_servers: Mapping[str, Mapping[str, Any]], timeout: float
) -> dict[str, str]:
    """Which extra servers cannot be reached now: ``{name: "<url>: <why>"}``.

    Each server is connected to once (initialise, list its tools) and closed; nothing is kept.
    """
    from langchain_mcp_adapters.client import MultiServerMCPClient

    async def probe(name: str, spec: Mapping[str, Any]) -> None:
        client = MultiServerMCPClient({name: dict(spec)})  # type: ignore[dict-item]
        async with client.session(name) as session:
            await session.list_tools()

    found: dict[str, str] = {}
    for name, spec in extra_servers.items():
        try:
            await asyncio.wait_for(probe(name, spec), timeout)
        except Exception as exc:
            reason = _first_reason(exc)
            found[name] = f"{_server_url(spec)}: {reason}"
    return found


def _first_reason(exc: BaseException) -> str:
    """The innermost meaningful message of an exception (groups flattened)."""
    seen = exc
    while isinstance(seen, BaseExceptionGroup) and seen.exceptions:
        seen = seen.exceptions[0]
    if isinstance(seen, TimeoutError):
        return "no answer within the connect timeout"
    text = " ".join(str(seen).split())
    return f"{type(seen).__name__}: {text}" if text else type(seen).__name__
