"""The factory: the governed graph's nodes wired by edges, and ``create_governed_agent``.

::

    START -> retrieve_tools -> model --(no tool call)--> END
                  |              |  (tool calls)
                  |              v
                  |        governed_tool --(ok / failed)--> model
                  |          |--(idempotency)--> denial_handler_idempotency --.
                  |          |--(confidence)---> denial_handler_confidence ---+--> the next gate's
                  |          |--(risk_floor)---> denial_handler_risk_floor ---'  handler|model|END
                  |          '--(halt: an unknown gate)--> END
                  '--(<gate> pending: a new turn while an operator is awaited)--> that gate's
                                                                                 handler

The nodes live in :mod:`algenta_graph.nodes` (``retrieve_tools`` and ``model`` in
:mod:`~algenta_graph.nodes.agent`, ``governed_tool`` in :mod:`~algenta_graph.nodes.governed_tool`,
one handler per gate in :mod:`~algenta_graph.nodes.denial_handler`, all executions through one
:class:`~algenta_graph.nodes.executor.DecisionExecutor`); node names and routes in
:mod:`algenta_graph.topology`. The whole design is in ``docs/ARCHITECTURE.md``.

Every option of :func:`create_governed_agent` that makes sense outside Python code is also a key
of the one configuration, :class:`~algenta_graph.config.AgentConfig`, which the served graph is
built from too (:mod:`algenta_graph.serving.server`): ``create_governed_agent(config=...)``
takes it (or a file's path), its arguments win over it, and both ways share its defaults.

Usage::

    from langgraph.types import Command
    from algenta_graph import governed_agent

    async with governed_agent("openai:gpt-5", profile="execute", checkpointer="r.sqlite") as graph:
        cfg = {"configurable": {"thread_id": "t1"}}
        out = await graph.ainvoke({"messages": [("user", "execute decision dec_1 ...")]}, cfg)
        out["receipts"], out["denials"], out["operator_decisions"]
        if out.get("__interrupt__"):          # an escalated denial waits for an operator
            out = await graph.ainvoke(
                Command(resume={"action": "override", "operator": "ana", "reason": "..."}), cfg
            )

    # the same graph from a configuration file (the ALGENTA_* variables win over it)
    graph = await create_governed_agent(config="agent.toml", checkpointer="r.sqlite")
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import weakref
from collections.abc import AsyncIterator, Hashable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypeIs

from algenta_graph._langgraph import default_durability
from algenta_graph.config import (
    DEFAULT_STEP_LIMIT,
    DEFAULT_SYSTEM_PROMPT,
    DEFAULT_TOP_K,
    AgentConfig,
    load_config,
    resolve_config,
)
from algenta_graph.errors import EngineConnectionError
from algenta_graph.governance.contract import resolve_profile
from algenta_graph.governance.escalations import EscalationSettings
from algenta_graph.governance.gates import DEFAULT_POLICIES, GATE_NAMES, parse_on_denial
from algenta_graph.governance.run_settings import GraphSettings, RunContext
from algenta_graph.governance.tool_gates import CompiledGates, ToolGates, parse_tool_gates
from algenta_graph.models import resolve_model
from algenta_graph.nodes.agent import STEP_LIMIT_MESSAGE, AgentNodes
from algenta_graph.nodes.denial_handler import DenialHandler, route_pending_escalation
from algenta_graph.nodes.executor import DecisionExecutor
from algenta_graph.nodes.governed_tool import GovernedToolNode
from algenta_graph.nodes.operators import AuthorizeOperator
from algenta_graph.retrieval.catalog import GovernedCatalog
from algenta_graph.state import GovernedInput, GovernedState
from algenta_graph.telemetry.handler import instrument
from algenta_graph.topology import (
    GOVERNED_TOOL_NODE,
    HALT,
    MODEL_NODE,
    RETRIEVE_NODE,
    UNFINISHED_STEP,
    handler_node_name,
    pending_route,
)

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings
    from langchain_core.tools import BaseTool
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.graph.state import CompiledStateGraph
    from langgraph.store.base import BaseStore

    from algenta_graph.connection.engine import EngineClient, EngineConnection
    from algenta_graph.retrieval import ToolIndex
    from algenta_graph.retrieval.usage import UsageSignal

__all__ = [
    "DEFAULT_STEP_LIMIT",
    "DEFAULT_SYSTEM_PROMPT",
    "STEP_LIMIT_MESSAGE",
    "aclose_governed_agent",
    "build_governed_graph",
    "create_governed_agent",
    "governed_agent",
    "open_engine_connection",
    "unreachable_servers",
]

logger = logging.getLogger(__name__)


def build_governed_graph(
    connection: EngineClient,
    model: BaseChatModel | str | None = None,
    *,
    top_k: int = DEFAULT_TOP_K,
    on_denial: Mapping[str, str] | str | None = None,
    index: ToolIndex | None = None,
    system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
    authorize_operator: AuthorizeOperator | None = None,
    always_include: Sequence[str] = (),
    usage: UsageSignal | None = None,
    embeddings: Embeddings | None = None,
    escalation: EscalationSettings | None = None,
    tool_gates: ToolGates | CompiledGates | Mapping[str, Any] | None = None,
) -> StateGraph[Any, Any, Any, Any]:
    """Build the governed graph (uncompiled) over an **open** connection.

    The catalog (``connection.tools``) and the BM25 index over it are built here, once. Compile
    it yourself with any checkpointer; consider ``durability="sync"`` when invoking (see
    :func:`create_governed_agent`).

    Args:
        connection: the open engine connection
            (:class:`~algenta_graph.connection.engine.EngineClient`).
        model: as for :func:`create_governed_agent`.
        top_k: how many tools retrieval binds per turn (an int >= 1).
        on_denial: as for :func:`create_governed_agent`.
        index: a tool index already built over the same tools, to reuse.
        system_prompt: the model's system prompt (default :data:`DEFAULT_SYSTEM_PROMPT`; none
            when ``None`` or empty).
        authorize_operator: ``(identity, gate, config) -> bool``, who may answer an escalation.
        always_include: tool names bound on every step whatever retrieval ranks (not counted
            in ``top_k``; still subject to the run's profile).
        usage: a :class:`~algenta_graph.retrieval.usage.UsageSignal` (kept in a LangGraph
            store) that reranks retrieval by what served similar queries and learns from each
            successful call.
        embeddings: any LangChain ``Embeddings``, fused with BM25 in the native index
            (:mod:`algenta_graph.retrieval.fusion`) (nothing is downloaded or called without
            it).
        escalation: how the denial handlers ask operators
            (:class:`~algenta_graph.governance.escalations.EscalationSettings`: reasons,
            ``per_call`` mode, allowed decisions per gate, deadlines, notifications; default
            the defaults).
        tool_gates: the graph-side gates' rules for any tool
            (:class:`~algenta_graph.governance.tool_gates.ToolGates`, its keys as a mapping, or
            already compiled): which calls an operator must approve, call budgets, argument
            rules. Default: none.

    Returns:
        The uncompiled ``StateGraph``.

    Raises:
        ValueError: ``top_k`` is not an int >= 1, ``on_denial`` or ``tool_gates`` is
            malformed (a predicate that does not import is named with its rule), ``index`` and
            ``embeddings`` are both given (pass ``embeddings=`` to the ``ToolIndex``), or
            ``always_include`` names a tool the catalog does not show.
    """
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"top_k must be an int >= 1, got {top_k!r}")
    policies = {**DEFAULT_POLICIES, **parse_on_denial(on_denial, "on_denial")}
    if index is None:
        from algenta_graph.retrieval import ToolIndex

        index = ToolIndex(embeddings=embeddings)
        index.add(connection.tools)
    elif embeddings is not None:
        raise ValueError("pass embeddings= to the ToolIndex you pass as index=, not both")
    catalog = GovernedCatalog(
        connection, resolve_model(model), index, always_include=always_include, usage=usage
    )
    built = GraphSettings(top_k=top_k, policies=policies)
    executor = DecisionExecutor(connection)  # one, held by governed_tool and every handler
    if not isinstance(tool_gates, CompiledGates):
        tool_gates = parse_tool_gates(tool_gates).compile()
    tools = GovernedToolNode(
        catalog, executor, built, None if tool_gates.gates.empty else tool_gates
    )
    nodes = AgentNodes(catalog, built, system_prompt)
    graph: StateGraph[Any, Any, Any, Any] = StateGraph(
        GovernedState, context_schema=RunContext, input_schema=GovernedInput
    )
    graph.add_node(RETRIEVE_NODE, nodes.retrieve_tools)
    graph.add_node(MODEL_NODE, nodes.call_model)
    graph.add_node(GOVERNED_TOOL_NODE, tools)
    for gate in GATE_NAMES:
        destinations: dict[str, str] = {MODEL_NODE: "resolved", END: "halt"}
        destinations.update({handler_node_name(g): f"then {g}" for g in GATE_NAMES if g != gate})
        graph.add_node(
            handler_node_name(gate),
            DenialHandler(
                gate,
                executor,
                authorize_operator=authorize_operator,
                settings=escalation,
                tool_gates=tool_gates,
            ),
            destinations=destinations,
        )
    graph.add_edge(START, RETRIEVE_NODE)
    # a turn on a thread still waiting for an operator asks the operator again (invariant 12)
    # ... and a turn after a run cut short inside governed_tool finishes that step first (13)
    after_retrieval: dict[Hashable, str] = {
        MODEL_NODE: MODEL_NODE,
        UNFINISHED_STEP: GOVERNED_TOOL_NODE,
    }
    after_retrieval.update({pending_route(g): handler_node_name(g) for g in GATE_NAMES})
    graph.add_conditional_edges(RETRIEVE_NODE, route_pending_escalation, after_retrieval)
    graph.add_conditional_edges(
        MODEL_NODE, nodes.route_after_model, {"tool_calls": GOVERNED_TOOL_NODE, "answer": END}
    )
    # one edge per (source, target) is drawn, labelled by the first key: "ok" shows for model
    path_map: dict[Hashable, str] = {"ok": MODEL_NODE, "failed": MODEL_NODE}
    path_map.update({gate: handler_node_name(gate) for gate in GATE_NAMES})
    path_map[HALT] = END
    graph.add_conditional_edges(GOVERNED_TOOL_NODE, tools.route, path_map)
    return graph


# ---------------------------------------------------------------------- compiled agents

_OWNED: weakref.WeakKeyDictionary[Any, contextlib.AsyncExitStack] = weakref.WeakKeyDictionary()


async def create_governed_agent(
    model: BaseChatModel | str | None = None,
    *,
    config: AgentConfig | str | os.PathLike[str] | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
    operator_api_key: str | None = None,
    profile: str | None = None,
    top_k: int | None = None,
    on_denial: Mapping[str, str] | str | None = None,
    checkpointer: BaseCheckpointSaver[Any] | str | Path | None = None,
    extra_servers: Mapping[str, dict[str, Any]] | None = None,
    connection: EngineConnection | None = None,
    system_prompt: str | None = None,
    durability: Literal["sync", "async", "exit"] | None = "sync",
    step_limit: int | None = None,
    authorize_operator: AuthorizeOperator | None = None,
    always_include: Sequence[str] | None = None,
    usage: UsageSignal | None = None,
    embeddings: Embeddings | None = None,
    store: BaseStore | None = None,
    name: str | None = None,
    escalation: EscalationSettings | None = None,
    tool_gates: ToolGates | Mapping[str, Any] | None = None,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Connect to the engine, list its tools and return the compiled governed graph.

    Every option not given here (``None``) comes from ``config``, an
    :class:`~algenta_graph.config.AgentConfig` (the one the served graph is built from), or
    its defaults; an argument given here wins over the configuration's value. Without
    ``connection=``, the graph opens one and keeps it open for its life: close it with
    ``await aclose_governed_agent(graph)``, or use ``async with governed_agent(...) as graph``.

    An extra server that cannot be reached is left out with a warning naming its URL; the
    graph serves the engine's tools (and the other servers').

    Args:
        model: a chat model, an ``init_chat_model`` string (``"openai:gpt-5"``) or ``None``
            for the configuration's (default the offline
            :class:`~algenta_graph.models.DemoChatModel` stand-in).
        config: an :class:`~algenta_graph.config.AgentConfig`, or the path of a TOML / JSON
            configuration file (read with :func:`~algenta_graph.config.load_config`, so the
            ``ALGENTA_*`` variables win over it). Default: the defaults.
        base_url: the engine's MCP endpoint (see
            :class:`~algenta_graph.connection.engine.EngineConnection`).
        api_key: the engine's API token (see
            :class:`~algenta_graph.connection.engine.EngineConnection`).
        operator_api_key: the engine credential of the operator path alone (an engine key
            with the operator role; default ``ALGENTA_OPERATOR_API_KEY``): the override flags
            are sent with it, the model's calls never are.
        profile: the tool profile (default ``"observe"``). With ``connection=`` the
            connection's profile applies and ``profile`` may only narrow it.
        top_k: how many tools retrieval binds per turn (an int >= 1; default 5).
        on_denial: ``{gate: "report" | "escalate" | "halt"}`` (or one policy for every gate)
            over :data:`~algenta_graph.governance.gates.DEFAULT_POLICIES`; a run may only make
            them stricter.
        checkpointer: any ``BaseCheckpointSaver``, or a SQLite path / ``postgresql://`` URL
            (opened here and closed with the graph; see
            :mod:`algenta_graph.serving.checkpointer`).
        extra_servers: more MCP servers whose tools join the catalog, as
            ``langchain-mcp-adapters`` connection dicts (see
            :class:`~algenta_graph.connection.engine.EngineConnection`); replaces the
            configuration's.
        connection: an open engine connection to use instead of opening one (the caller closes
            it; ``base_url``, ``api_key``, ``operator_api_key`` and ``extra_servers`` are then
            not given, and the configuration's engine settings are not used).
        system_prompt: the model's system prompt (default
            :data:`~algenta_graph.config.DEFAULT_SYSTEM_PROMPT`; ``""`` for none).
        durability: the default checkpoint durability of every run (``"sync"``: a step's
            checkpoint is written before the next step starts); a run's own ``durability=``
            wins. Without a checkpointer none is set.
        step_limit: the default ``recursion_limit`` (default 50); a run that reaches it ends
            with :data:`STEP_LIMIT_MESSAGE` instead of ``GraphRecursionError``.
        authorize_operator: ``(identity, gate, config) -> bool``, who may answer an escalation.
        always_include: see :func:`build_governed_graph`.
        usage: see :func:`build_governed_graph`. The configuration's ``[usage]`` makes one that
            keeps its history in the run's store (``store=``, or a LangGraph server's).
        embeddings: see :func:`build_governed_graph`; the catalog is embedded off the event
            loop.
        store: the LangGraph store the graph is compiled with (``runtime.store`` of its runs;
            the usage signal's history). A LangGraph server supplies its own.
        name: the compiled graph's name.
        escalation: see :func:`build_governed_graph`; default the configuration's
            ``[escalation]``.
        tool_gates: see :func:`build_governed_graph`; default the configuration's
            ``[tool_gates]`` (approval, budgets and argument rules on any tool).

    The graph is instrumented (:func:`~algenta_graph.telemetry.instrument`) when OpenTelemetry
    is configured when it is built (the configuration's ``[telemetry]`` exporter, or the
    process's own providers); otherwise it is returned as it is.

    Returns:
        The compiled governed graph.

    Raises:
        ValueError: a malformed argument (``step_limit`` below 4, ``connection=`` together
            with ``base_url`` / ``api_key`` / ``operator_api_key`` / ``extra_servers``, a
            configured usage signal with a checkpointer but no ``store=``, and those of
            :func:`build_governed_graph`).
        ConfigError: the configuration is wrong (a secret missing from the environment, an
            import path that does not import, ...), every problem named.
        EngineConnectionError: the engine could not be reached.
        ModelSetupError: the model string could not be turned into a chat model.
    """
    cfg = await _as_config(config)
    skip = {
        key
        for key, given in (
            ("model", model),
            ("embeddings", embeddings),
            ("authorize_operator", authorize_operator),
        )
        if given is not None
    }
    # imports and models may touch files or the network: never on the event loop
    resolved = await asyncio.to_thread(resolve_config, cfg, skip=skip)
    step_limit = cfg.step_limit if step_limit is None else step_limit
    if isinstance(step_limit, bool) or not isinstance(step_limit, int) or step_limit < 4:
        raise ValueError(f"step_limit must be an int >= 4, got {step_limit!r}")
    if connection is not None and (
        base_url is not None
        or api_key is not None
        or operator_api_key is not None
        or extra_servers is not None
    ):
        raise ValueError(
            "pass either connection= or base_url/api_key/operator_api_key/extra_servers, not both"
        )
    if usage is None and cfg.usage is not None:
        from algenta_graph.retrieval.usage import UsageSignal

        u = cfg.usage
        usage = UsageSignal(
            None,
            weight=u.weight,
            half_life=u.half_life_days * 86_400.0,
            per_tool_cap=u.per_tool_cap,
            max_terms=u.max_terms,
            depth=u.depth,
        )
    if usage is not None and store is None and checkpointer is not None and usage.store is None:
        raise ValueError(
            "the usage signal keeps its history in a LangGraph store: pass store= (e.g. "
            "langgraph.store.sqlite.SqliteStore) with the checkpointer"
        )
    stack = contextlib.AsyncExitStack()
    try:
        if checkpointer is not None and not _is_saver(checkpointer):
            from algenta_graph.serving.checkpointer import open_checkpointer

            checkpointer = await stack.enter_async_context(open_checkpointer(checkpointer))
        if connection is None:
            connection = await open_engine_connection(
                cfg,
                base_url=base_url if base_url is not None else cfg.base_url,
                api_key=api_key if api_key is not None else resolved.api_key,
                operator_api_key=(
                    operator_api_key if operator_api_key is not None else resolved.operator_api_key
                ),
                profile=profile or cfg.profile,
                extra_servers=extra_servers
                if extra_servers is not None
                else resolved.extra_servers,
            )
            stack.push_async_callback(connection.aclose)
            profile = None  # the connection's own profile
        elif profile is None and "profile" in cfg.model_fields_set:
            profile = cfg.profile  # a configured profile narrows the caller's connection
        base_tools = cfg.always_include if always_include is None else always_include
        base_tools = _without_lost_tools(base_tools, connection)
        index = await build_index(
            connection.tools, embeddings if embeddings is not None else resolved.embeddings
        )
        gates = parse_tool_gates(cfg.tool_gates if tool_gates is None else tool_gates)
        compiled_gates = await asyncio.to_thread(gates.compile)  # predicates import: off the loop
        graph = build_governed_graph(
            connection,
            model if model is not None else resolved.model,
            top_k=cfg.top_k if top_k is None else top_k,
            on_denial=_policies(cfg) if on_denial is None else on_denial,
            index=index,
            system_prompt=cfg.system_prompt if system_prompt is None else system_prompt,
            authorize_operator=(
                authorize_operator
                if authorize_operator is not None
                else resolved.authorize_operator
            ),
            always_include=base_tools,
            usage=usage,
            escalation=escalation if escalation is not None else resolved.escalation,
            tool_gates=compiled_gates,
        )
        compiled = graph.compile(checkpointer=checkpointer, store=store, name=name or cfg.name)
        conf: dict[str, Any] = {}
        if profile is not None:
            conf["profile"] = resolve_profile(profile).name
        if durability is not None and checkpointer is not None:
            # (without a checkpointer durability means nothing, and langgraph 1.2 fails on
            # "sync" there)
            conf.update(default_durability(durability))
        with_config: RunnableConfig = {"recursion_limit": step_limit}
        if conf:
            with_config["configurable"] = conf
        compiled = compiled.with_config(with_config)
        if cfg.telemetry.exporter == "otlp":
            from algenta_graph.telemetry.otlp import configure_otlp_once

            configure_otlp_once(cfg.telemetry.endpoint, service_name=cfg.telemetry.service_name)
        compiled = instrument(compiled)
    except BaseException:
        await stack.aclose()
        raise
    _OWNED[compiled] = stack
    return compiled


def _policies(config: AgentConfig) -> dict[str, str]:
    return {str(gate): str(policy) for gate, policy in (config.on_denial or {}).items()}


async def _as_config(config: AgentConfig | str | os.PathLike[str] | None) -> AgentConfig:
    if config is None:
        return AgentConfig()
    if isinstance(config, AgentConfig):
        return config
    if isinstance(config, str | os.PathLike):
        return await asyncio.to_thread(load_config, config)
    raise TypeError(
        f"config must be an AgentConfig or the path of a configuration file, not "
        f"{type(config).__name__}"
    )


async def build_index(tools: Sequence[BaseTool], embeddings: Embeddings | None) -> ToolIndex:
    """The tool index over ``tools``, built off the event loop.

    With ``embeddings`` every tool is embedded once (``embed_documents``, in a worker thread,
    so a network embedding model never blocks the loop's other runs).
    """
    from algenta_graph.retrieval import ToolIndex

    def build() -> ToolIndex:
        index = ToolIndex(embeddings=embeddings)
        index.add(tools)
        return index

    return await asyncio.to_thread(build)


def _server_url(spec: Mapping[str, Any]) -> str:
    if spec.get("url"):
        return str(spec["url"])
    command = [str(spec.get("command") or "")] + [str(a) for a in spec.get("args") or ()]
    return " ".join(command).strip() or "(no url)"


_UNREACHABLE: weakref.WeakKeyDictionary[Any, dict[str, str]] = weakref.WeakKeyDictionary()
"""The extra servers a connection was opened without: ``{name: url}``."""


async def open_engine_connection(
    config: AgentConfig | None = None,
    *,
    base_url: str | None,
    api_key: str | None,
    operator_api_key: str | None,
    profile: str,
    extra_servers: Mapping[str, Mapping[str, Any]] | None,
) -> EngineConnection:
    """Open the engine connection with its extra servers; an unreachable extra is left out.

    Each extra server that cannot be reached is logged as a warning naming it and its URL,
    and the connection opens without it (the engine's tools, and the other servers', are
    served). The timeouts are the configuration's (``connect_timeout``, ``call_timeout``).

    Raises:
        EngineConnectionError: the engine itself could not be reached.
    """
    from algenta_graph.connection.engine import EngineConnection

    cfg = config or AgentConfig()
    servers = {name: dict(spec) for name, spec in (extra_servers or {}).items()}
    lost: dict[str, str] = {}
    while True:
        conn = EngineConnection(
            base_url,
            api_key=api_key,
            operator_api_key=operator_api_key,
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
            if not failed or exc.url == conn.url:
                raise
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


def _without_lost_tools(names: Sequence[str], connection: Any) -> Sequence[str]:
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


def _is_saver(value: object) -> TypeIs[BaseCheckpointSaver[Any]]:
    from langgraph.checkpoint.base import BaseCheckpointSaver

    return isinstance(value, BaseCheckpointSaver)


async def aclose_governed_agent(graph: Any) -> None:
    """Close what :func:`create_governed_agent` opened for ``graph`` (idempotent)."""
    stack = _OWNED.pop(graph, None)
    if stack is not None:
        await stack.aclose()


@contextlib.asynccontextmanager
async def governed_agent(
    model: BaseChatModel | str | None = None, **kwargs: Any
) -> AsyncIterator[CompiledStateGraph[Any, Any, Any, Any]]:
    """:func:`create_governed_agent` as an async context manager, closing the graph on exit.

    ``async with governed_agent(...) as graph``; the arguments are
    :func:`create_governed_agent`'s.
    """
    graph = await create_governed_agent(model, **kwargs)
    try:
        yield graph
    finally:
        await aclose_governed_agent(graph)
