"""The graph factory that ``langgraph.json`` points at, so ``langgraph dev`` serves the graph.

``langgraph dev`` (and any LangGraph server) calls :func:`make_graph` on **every** access to the
graph: each run, each state read, each drawing in Studio. The factory therefore caches what is
expensive (the engine connection with its catalog, and the compiled graph) per event loop and
per setting, and compiles the graph **without** a checkpointer: the server supplies its own.

Settings come from the environment (the server's process environment, or the ``env`` file named
in ``langgraph.json``):

- ``ALGENTA_BASE_URL``: the engine's MCP endpoint (default ``http://localhost:8000/mcp``).
- ``ALGENTA_API_KEY``: bearer token for the engine (default: none).
- ``ALGENTA_OPERATOR_API_KEY``: the engine credential of the operator path alone (a key with the
  engine's operator role): overrides are sent with it after an operator's answer, never the
  model's calls (default: none; the operator path then uses ``ALGENTA_API_KEY``).
- ``ALGENTA_PROFILE``: ``observe`` (default), ``govern``, ``execute`` or ``full``.
- ``ALGENTA_MODEL``: an ``init_chat_model`` string (``"openai:gpt-5"``), or ``demo`` (default)
  for the offline :class:`~algenta_graph.models.DemoChatModel` stand-in.
- ``ALGENTA_TOP_K``: how many tools retrieval binds per turn (default ``5``).
- ``ALGENTA_ON_DENIAL``: ``report``, ``escalate`` or ``halt`` for every gate, or JSON per gate
  (``{"confidence": "escalate", "idempotency": "report"}``); default: the graph's policies
  (:data:`~algenta_graph.governance.gates.DEFAULT_POLICIES`). A run may only make them stricter.

A malformed value raises ``ValueError`` naming the variable.

Security (see :mod:`algenta_graph.serving.auth`): ``langgraph.json`` names the custom auth object
``algenta_graph.serving.auth:auth`` (bearer tokens from ``ALGENTA_AUTH_FILE``, roles ``agent``,
``operator[:<gate>]``, ``auditor``; open with a loud warning when unset). The served graph asks
:func:`~algenta_graph.serving.auth.served_authorize_operator` before an operator's answer takes
effect, and its ``update_state`` (:func:`guard_records`), for every caller, with or without auth,
refuses the governed record fields, any update as a governance node, and any update while an
escalation (or a governed step) is pending on the thread: only an operator's resume answers an
escalation.

``ALGENTA_PROFILE`` is the ceiling: the served graph's catalog is that profile's tools. Per run,
``profile`` (narrowing only), ``top_k`` and ``on_denial`` can be changed through the run's
context (Studio's context panel, or ``context={...}`` in ``langgraph_sdk``); the server mirrors
context into ``config["configurable"]``, where the graph reads them (see
:mod:`algenta_graph.graph`). Example::

    client = get_client(url="http://127.0.0.1:2024")
    await client.runs.wait(None, "governed_agent", input={"messages": [...]},
                           context={"top_k": 3, "on_denial": {"confidence": "report"}})
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from langgraph.graph.state import CompiledStateGraph

from algenta_graph.governance.contract import DEFAULT_PROFILE, resolve_profile
from algenta_graph.governance.gates import parse_on_denial
from algenta_graph.governance.record_guard import guard_records
from algenta_graph.graph import (
    create_governed_agent,
)
from algenta_graph.models import resolve_model
from algenta_graph.serving.auth import served_authorize_operator

if TYPE_CHECKING:
    from algenta_graph.connection.engine import EngineConnection

__all__ = [
    "DEFAULT_TOP_K",
    "ENV_API_KEY",
    "ENV_BASE_URL",
    "ENV_MODEL",
    "ENV_ON_DENIAL",
    "ENV_OPERATOR_API_KEY",
    "ENV_PROFILE",
    "ENV_TOP_K",
    "ServerSettings",
    "aclose_cached",
    "build_graph",
    "make_graph",
]

ENV_BASE_URL = "ALGENTA_BASE_URL"
ENV_API_KEY = "ALGENTA_API_KEY"
ENV_OPERATOR_API_KEY = "ALGENTA_OPERATOR_API_KEY"
ENV_PROFILE = "ALGENTA_PROFILE"
ENV_MODEL = "ALGENTA_MODEL"
ENV_TOP_K = "ALGENTA_TOP_K"
ENV_ON_DENIAL = "ALGENTA_ON_DENIAL"

DEFAULT_TOP_K = 5
DEMO_MODEL = "demo"
"""``ALGENTA_MODEL`` value (or absence) that selects the offline demo model."""


@dataclass(frozen=True)
class ServerSettings:
    """Everything the factory needs to build one graph; hashable, so it keys the cache."""

    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    profile: str = DEFAULT_PROFILE
    operator_api_key: str | None = field(default=None, repr=False)
    model: str | None = None
    top_k: int = DEFAULT_TOP_K
    on_denial: tuple[tuple[str, str], ...] | None = None

    def __post_init__(self) -> None:
        """Check the profile and ``top_k`` (``ValueError`` naming what is wrong)."""
        resolve_profile(self.profile)  # ValueError naming the valid profiles
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 1:
            raise ValueError(f"top_k must be a positive integer, not {self.top_k!r}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ServerSettings:
        """Read the ``ALGENTA_*`` variables; a malformed value raises ``ValueError`` naming it.

        >>> ServerSettings.from_env({"ALGENTA_PROFILE": "execute", "ALGENTA_TOP_K": "3"}).top_k
        3
        """
        env = os.environ if environ is None else environ
        model = env.get(ENV_MODEL) or None
        profile = env.get(ENV_PROFILE) or DEFAULT_PROFILE
        try:
            resolve_profile(profile)
        except ValueError as exc:
            raise ValueError(f"{ENV_PROFILE}: {exc}") from None
        return cls(
            base_url=env.get(ENV_BASE_URL) or None,
            api_key=env.get(ENV_API_KEY) or None,
            operator_api_key=env.get(ENV_OPERATOR_API_KEY) or None,
            profile=profile,
            model=None if model == DEMO_MODEL else model,
            top_k=_parse_top_k(env.get(ENV_TOP_K), ENV_TOP_K),
            on_denial=_freeze(parse_on_denial(env.get(ENV_ON_DENIAL), ENV_ON_DENIAL)),
        )

    @property
    def on_denial_policy(self) -> dict[str, str] | None:
        """``on_denial`` as ``create_governed_agent`` takes it: ``{gate: policy}``."""
        return dict(self.on_denial) if self.on_denial is not None else None


def _parse_top_k(value: Any, name: str) -> int:
    if value is None or value == "":
        return DEFAULT_TOP_K
    try:
        top_k = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a positive integer, not {value!r}") from None
    if top_k < 1 or (isinstance(value, float) and value != top_k):
        raise ValueError(f"{name} must be a positive integer, not {value!r}")
    return top_k


def _freeze(value: Mapping[str, str]) -> tuple[tuple[str, str], ...] | None:
    return tuple(sorted(value.items())) if value else None


# ---------------------------------------------------------------------------------------------
# the per-event-loop cache


@dataclass
class _LoopCache:
    loop: asyncio.AbstractEventLoop
    lock: asyncio.Lock
    connections: dict[tuple[str | None, str | None, str | None, str], EngineConnection]
    graphs: dict[ServerSettings, CompiledStateGraph[Any, Any, Any, Any]]


_CACHES: dict[int, _LoopCache] = {}


def _loop_cache() -> _LoopCache:
    loop = asyncio.get_running_loop()
    for key, cache in list(_CACHES.items()):
        if cache.loop.is_closed():
            del _CACHES[key]
    found = _CACHES.get(id(loop))
    if found is None or found.loop is not loop:
        found = _CACHES[id(loop)] = _LoopCache(loop, asyncio.Lock(), {}, {})
    return found


async def _connection(cache: _LoopCache, settings: ServerSettings) -> EngineConnection:
    from algenta_graph.connection.engine import EngineConnection

    key = (settings.base_url, settings.api_key, settings.operator_api_key, settings.profile)
    conn = cache.connections.get(key)
    if conn is None:
        conn = EngineConnection(
            settings.base_url,
            api_key=settings.api_key,
            operator_api_key=settings.operator_api_key or "",
            profile=settings.profile,
        )
        await conn.open()  # EngineConnectionError naming the URL; nothing is cached then
        cache.connections[key] = conn
    return conn


async def build_graph(settings: ServerSettings) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The compiled graph for ``settings`` on the running event loop, built once and cached.

    One engine connection (MCP session, catalog) per event loop and engine setting; a failed
    connection raises :class:`~algenta_graph.errors.EngineConnectionError` and caches nothing.
    """
    cache = _loop_cache()
    graph = cache.graphs.get(settings)
    if graph is not None:
        return graph
    async with cache.lock:
        graph = cache.graphs.get(settings)
        if graph is None:
            conn = await _connection(cache, settings)
            graph = await create_governed_agent(
                resolve_model(settings.model),
                connection=conn,
                top_k=settings.top_k,
                on_denial=settings.on_denial_policy,
                checkpointer=None,
                authorize_operator=served_authorize_operator,
            )
            graph = guard_records(graph)
            cache.graphs[settings] = graph
    return graph


async def aclose_cached() -> None:
    """Close the connections cached on the running event loop and forget its graphs."""
    loop = asyncio.get_running_loop()
    cache = _CACHES.pop(id(loop), None)
    if cache is None or cache.loop is not loop:
        return
    cache.graphs.clear()
    for conn in cache.connections.values():
        await conn.aclose()
    cache.connections.clear()


async def make_graph() -> CompiledStateGraph[Any, Any, Any, Any]:
    """The factory ``langgraph.json`` names: the governed graph for the current environment.

    Compiled without a checkpointer (the server supplies its own). The environment is read on
    every call; the graph for each distinct setting is built once per event loop. Per-run
    settings travel in the run's config, which the graph itself reads.
    """
    return await build_graph(ServerSettings.from_env())
