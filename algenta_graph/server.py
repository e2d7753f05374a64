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
  (:data:`~algenta_graph.gates.DEFAULT_POLICIES`). A run may only make them stricter.

A malformed value raises ``ValueError`` naming the variable.

Security (see :mod:`algenta_graph.auth`): ``langgraph.json`` names the custom auth object
``algenta_graph.auth:auth`` (bearer tokens from ``ALGENTA_AUTH_FILE``, roles ``agent``,
``operator[:<gate>]``, ``auditor``; open with a loud warning when unset). The served graph asks
:func:`~algenta_graph.auth.served_authorize_operator` before an operator's answer takes effect,
and its ``update_state`` (:func:`guard_records`), for every caller, with or without auth,
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal

from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, Send
from pydantic import Field
from typing_extensions import TypedDict

from algenta_graph.auth import RECORD_FIELDS, served_authorize_operator
from algenta_graph.contract import DEFAULT_PROFILE, PROFILE_NAMES, resolve_profile
from algenta_graph.gates import GATE_NAMES, POLICIES, parse_on_denial
from algenta_graph.graph import (
    DENIAL_HANDLER_NODES,
    GOVERNANCE_NODES,
    create_governed_agent,
)
from algenta_graph.models import resolve_model

if TYPE_CHECKING:
    from langgraph.checkpoint.base import CheckpointTuple
    from langgraph.types import StateSnapshot

    from algenta_graph.connection import EngineConnection

__all__ = [
    "DEFAULT_TOP_K",
    "ENV_API_KEY",
    "ENV_BASE_URL",
    "ENV_MODEL",
    "ENV_ON_DENIAL",
    "ENV_OPERATOR_API_KEY",
    "ENV_PROFILE",
    "ENV_TOP_K",
    "RecordsWriteRefused",
    "RunContext",
    "ServerSettings",
    "aclose_cached",
    "build_graph",
    "guard_records",
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

GateName = Literal[GATE_NAMES]  # type: ignore[valid-type]  # derived from the one gate table
PolicyName = Literal[POLICIES]  # type: ignore[valid-type]


class RunContext(TypedDict, total=False):
    """Per-run settings of the governed agent; every one is optional."""

    # The served graph declares this as its context schema, so Studio shows a form for it;
    # the server mirrors a run's context into config["configurable"], where the graph reads it.

    profile: Annotated[
        str,
        Field(
            description="Narrow the tool profile for this run (never wider than ALGENTA_PROFILE).",
            json_schema_extra={"enum": list(PROFILE_NAMES)},
        ),
    ]
    top_k: Annotated[int, Field(ge=1, description="How many tools retrieval binds this run.")]
    on_denial: Annotated[
        dict[GateName, PolicyName] | PolicyName,
        Field(
            description=(
                "Denial policy per gate for this run (or one policy for every gate); each may "
                "only be stricter than the server's (report < escalate < halt)."
            )
        ),
    ]


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
    from algenta_graph.connection import EngineConnection

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
            if graph.context_schema is None:
                graph = graph.copy(update={"context_schema": RunContext})
            graph = guard_records(graph)
            cache.graphs[settings] = graph
    return graph


# ---------------------------------------------------------------------------------------------
# governed records are written by the graph's nodes only


def _http_forbidden(detail: str) -> Exception:
    try:  # the LangGraph server turns a Starlette HTTPException into its status code
        from starlette.exceptions import HTTPException
    except ImportError:  # pragma: no cover - starlette arrives with mcp
        return RecordsWriteRefused(detail)
    return HTTPException(status_code=403, detail=detail)


class RecordsWriteRefused(PermissionError):
    """An ``update_state`` tried to write governed records, to fork an earlier checkpoint, to
    write as a governance node, or to change a thread whose governed step is unfinished."""


_COPY = "__copy__"
"""LangGraph's ``as_node`` that copies the latest checkpoint, then applies the ``(values,
as_node)`` pairs listed as its values."""


def _updates(supersteps: Any) -> list[tuple[Any, Any]]:
    """Every ``(values, as_node)`` of ``supersteps``, including those nested in a copy's."""
    found: list[tuple[Any, Any]] = []
    for step in supersteps or ():
        for update in step or ():
            # a StateUpdate, or any (values, as_node[, task_id]) sequence, as LangGraph reads it
            fields: Sequence[Any] = update
            values, as_node, *_ = (*fields, None, None)
            found.append((values, as_node))
            if as_node == _COPY and _is_list(values):
                found.extend(_updates([[item for item in values if _is_list(item)]]))
    return found


def _is_list(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str | bytes)


def _records_written(values: Any) -> list[str]:
    """The governed record fields an update's values would write, however they are shaped:
    a mapping, a :class:`~langgraph.types.Command`'s ``update``, a list of either or of
    ``(field, value)`` pairs, or an object with the fields as attributes."""
    if values is None:
        return []
    if isinstance(values, Command):
        return _records_written(values.update)
    if isinstance(values, Mapping):
        return [f for f in RECORD_FIELDS if f in values]
    if _is_list(values):
        written: list[str] = []
        for item in values:
            if _is_list(item) and len(item) == 2 and isinstance(item[0], str):
                written += [item[0]] if item[0] in RECORD_FIELDS else []
            else:
                written += _records_written(item)
        return [f for f in RECORD_FIELDS if f in written]
    return [f for f in RECORD_FIELDS if getattr(values, f, None) is not None]


def _command_refusal(values: Any) -> str | None:
    """Why a Command in an update's values is refused: it resumes, or routes to governance."""
    commands = [values] if isinstance(values, Command) else []
    if _is_list(values):
        commands += [item for item in values if isinstance(item, Command)]
    for command in commands:
        if command.resume is not None:
            return (
                "update_state with a resume is refused: an escalation is answered only by an "
                'operator\'s resume (a run with command={"resume": ...})'
            )
        goto: Any = command.goto
        targets: Sequence[Any] = goto if _is_list(goto) else [goto]
        for target in targets:
            node = target.node if isinstance(target, Send) else target
            if node in GOVERNANCE_NODES:
                return (
                    f"update_state with a Command to {node!r} is refused: it is a governance "
                    "node, entered only by the graph's own routing"
                )
    return None


def _governance_refusal(as_node: Any, inferred: bool = False) -> str | None:
    if as_node not in GOVERNANCE_NODES:
        return None
    named = f"the last node that ran, {as_node!r}" if inferred else repr(as_node)
    return (
        f"update_state as {named} is refused: it is a governance node, entered only by a run; "
        "its results are the governed records and messages it writes itself, and an escalation "
        "is answered only by an operator's resume"
    )


def _refusal(config: Any, supersteps: Any) -> str | None:
    """Why an update is refused, from the update alone (no state is read)."""
    configurable = (config or {}).get("configurable") or {}
    if configurable.get("checkpoint_id"):
        return (
            "update_state from an earlier checkpoint is refused: a fork would drop the "
            "governed records written after it"
        )
    for values, as_node in _updates(supersteps):
        written = _records_written(values)
        if written:
            return (
                f"update_state on governed records ({', '.join(written)}) is refused: "
                "they are written only by the graph's own nodes"
            )
        refused = _governance_refusal(as_node) or _command_refusal(values)
        if refused:
            return refused
    return None


def _pending_refusal(state: StateSnapshot) -> str | None:
    """Why no update may change a thread in this state: a governance node is due on it."""
    waiting = sorted(
        {t.name for t in state.tasks if t.name in DENIAL_HANDLER_NODES and t.interrupts}
    )
    if waiting:
        return (
            f"update_state is refused: the thread has a pending escalation ({', '.join(waiting)}) "
            "waiting for an operator; it is answered only by an operator's resume "
            '(command={"resume": ...}), and no update may replace or complete it'
        )
    due = sorted({n for n in state.next if n in GOVERNANCE_NODES})
    if due:
        return (
            f"update_state is refused: the thread's governed step is unfinished ({', '.join(due)} "
            "is due); continue the run (a run without input) instead, so that it finishes and "
            "records what it did"
        )
    return None


def _inferred_refusal(
    graph: CompiledStateGraph[Any, Any, Any, Any], saved: CheckpointTuple | None
) -> str | None:
    """Why an ``as_node=None`` update is refused: LangGraph would attribute it to the last node
    that ran (its own rule, on the latest checkpoint), and that is a governance node (a run
    that halted in one)."""
    infer = getattr(graph, "_infer_as_node", None)
    if infer is None:  # pragma: no cover - a LangGraph without this rule: fail closed
        return "update_state without as_node is refused here: name the node it acts as (as_node)"
    return _governance_refusal(
        infer(saved.checkpoint["versions_seen"] if saved is not None else {}), inferred=True
    )


def _saver(graph: CompiledStateGraph[Any, Any, Any, Any], config: Any) -> Any:
    """The checkpointer ``update_state`` writes to (the graph's, or the one in ``config``)."""
    resolve = getattr(graph, "_state_checkpointer", None)
    if resolve is not None:
        return resolve(config)
    return graph.checkpointer  # pragma: no cover - an older or newer LangGraph


def _unnamed(supersteps: Any) -> bool:
    return any(as_node is None for _, as_node in _updates(supersteps))


class _RecordGuardedGraph(CompiledStateGraph):
    """The compiled graph, whose ``update_state`` cannot write governed records, write as a
    governance node, or change a thread on which a governance node is due."""

    def bulk_update_state(self, config: Any, supersteps: Any) -> Any:
        refused = _refusal(config, supersteps) or _pending_refusal(self.get_state(config))
        if not refused and _unnamed(supersteps):
            saved = _saver(self, config).get_tuple(config)
            refused = _inferred_refusal(self, saved)
        if refused:
            raise _http_forbidden(refused)
        return super().bulk_update_state(config, supersteps)

    async def abulk_update_state(self, config: Any, supersteps: Any) -> Any:
        refused = _refusal(config, supersteps) or _pending_refusal(await self.aget_state(config))
        if not refused and _unnamed(supersteps):
            saved = await _saver(self, config).aget_tuple(config)
            refused = _inferred_refusal(self, saved)
        if refused:
            raise _http_forbidden(refused)
        return await super().abulk_update_state(config, supersteps)


def guard_records(
    graph: CompiledStateGraph[Any, Any, Any, Any],
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """``graph`` whose ``(a)update_state``/``(a)bulk_update_state`` refuse (HTTP 403 when served):

    - any update naming ``receipts``, ``denials`` or ``operator_decisions``: in its values, in
      a :class:`~langgraph.types.Command`'s ``update`` (a bulk update's ``command``), or in the
      updates nested in a ``__copy__``;
    - any Command that resumes (only an operator's run answers an escalation) or routes
      (``goto``) to a governance node;
    - any update from an explicit earlier ``checkpoint_id`` (a fork);
    - any update as a governance node (:data:`~algenta_graph.graph.GOVERNANCE_NODES`:
      ``governed_tool`` and every ``denial_handler_<gate>``), named or, with ``as_node=None``,
      inferred by LangGraph as the last node that ran;
    - any update at all while a governance node is due on the thread (its state's ``next``,
      read with the graph's own ``(a)get_state``): a pending escalation is answered only by an
      operator's resume, and an unfinished governed step only by continuing the run.

    Runs are unaffected: nodes write records as before.
    """
    if isinstance(graph, _RecordGuardedGraph):
        return graph
    attrs = {k: v for k, v in graph.__dict__.items() if k != "__orig_class__"}
    return _RecordGuardedGraph(**attrs)


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
