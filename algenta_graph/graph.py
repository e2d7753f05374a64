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
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import AsyncIterator, Hashable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypeIs

from algenta_graph._langgraph import default_durability
from algenta_graph.governance.contract import resolve_profile
from algenta_graph.governance.gates import (
    DEFAULT_POLICIES,
    GATE_NAMES,
    describe_gates,
    parse_on_denial,
)
from algenta_graph.governance.run_settings import GraphSettings, RunContext
from algenta_graph.models import resolve_model
from algenta_graph.nodes.agent import STEP_LIMIT_MESSAGE, AgentNodes
from algenta_graph.nodes.answers import AuthorizeOperator
from algenta_graph.nodes.denial_handler import DenialHandler, route_pending_escalation
from algenta_graph.nodes.executor import DecisionExecutor
from algenta_graph.nodes.governed_tool import GovernedToolNode
from algenta_graph.retrieval.catalog import GovernedCatalog
from algenta_graph.state import GovernedInput, GovernedState
from algenta_graph.topology import (
    GOVERNED_TOOL_NODE,
    HALT,
    MODEL_NODE,
    RETRIEVE_NODE,
    UNFINISHED_STEP,
    handler_node_name,
    pending_route,
)

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.graph.state import CompiledStateGraph

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
]

DEFAULT_SYSTEM_PROMPT = (
    "You are a governed agent working on an Algenta decision engine through tools. "
    "If the tool you need is not bound, call search_tools to find it. "
    "execute_decision is governed by named policy gates:\n"
    + describe_gates()
    + "\nWhen a gate denies an execution, you cannot override it; tell the user which gate "
    "blocked which decision and why."
)
"""The system prompt by default: what the gates are, and that the model cannot override them."""
DEFAULT_STEP_LIMIT = 50
"""The default ``recursion_limit`` of a run (LangGraph's own default, 25, is about 10 tool
rounds of this graph)."""


def build_governed_graph(
    connection: EngineClient,
    model: BaseChatModel | str | None = None,
    *,
    top_k: int = 5,
    on_denial: Mapping[str, str] | str | None = None,
    index: ToolIndex | None = None,
    system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
    authorize_operator: AuthorizeOperator | None = None,
    always_include: Sequence[str] = (),
    usage: UsageSignal | None = None,
    embeddings: Embeddings | None = None,
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

    Returns:
        The uncompiled ``StateGraph``.

    Raises:
        ValueError: ``top_k`` is not an int >= 1, ``on_denial`` is malformed, ``index`` and
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
    tools = GovernedToolNode(catalog, executor, built)
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
            DenialHandler(gate, executor, authorize_operator=authorize_operator),
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
    base_url: str | None = None,
    api_key: str | None = None,
    operator_api_key: str | None = None,
    profile: str | None = None,
    top_k: int = 5,
    on_denial: Mapping[str, str] | str | None = None,
    checkpointer: BaseCheckpointSaver[Any] | str | Path | None = None,
    extra_servers: Mapping[str, dict[str, Any]] | None = None,
    connection: EngineConnection | None = None,
    system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
    durability: Literal["sync", "async", "exit"] | None = "sync",
    step_limit: int = DEFAULT_STEP_LIMIT,
    authorize_operator: AuthorizeOperator | None = None,
    always_include: Sequence[str] = (),
    usage: UsageSignal | None = None,
    embeddings: Embeddings | None = None,
    name: str = "algenta_governed_agent",
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Connect to the engine, list its tools and return the compiled governed graph.

    Without ``connection=``, the graph opens one and keeps it open for its life: close it with
    ``await aclose_governed_agent(graph)``, or use ``async with governed_agent(...) as graph``.

    Args:
        model: a chat model, an ``init_chat_model`` string (``"openai:gpt-5"``) or ``None``
            for the offline :class:`~algenta_graph.models.DemoChatModel` stand-in.
        base_url: the engine's MCP endpoint (see
            :class:`~algenta_graph.connection.engine.EngineConnection`).
        api_key: the engine's API token (see
            :class:`~algenta_graph.connection.engine.EngineConnection`).
        operator_api_key: the engine credential of the operator path alone (an engine key
            with the operator role; default ``ALGENTA_OPERATOR_API_KEY``): the override flags
            are sent with it, the model's calls never are.
        profile: the tool profile (default ``"observe"``). With ``connection=`` the
            connection's profile applies and ``profile`` may only narrow it.
        top_k: how many tools retrieval binds per turn (an int >= 1).
        on_denial: ``{gate: "report" | "escalate" | "halt"}`` (or one policy for every gate)
            over :data:`~algenta_graph.governance.gates.DEFAULT_POLICIES`; a run may only make
            them stricter.
        checkpointer: any ``BaseCheckpointSaver``, or a SQLite path / ``postgresql://`` URL
            (opened here and closed with the graph; see
            :mod:`algenta_graph.serving.checkpointer`).
        extra_servers: more MCP servers whose tools join the catalog (see
            :class:`~algenta_graph.connection.engine.EngineConnection`).
        connection: an open engine connection to use instead of opening one (the caller closes
            it; ``base_url``, ``api_key``, ``operator_api_key`` and ``extra_servers`` are then
            not given).
        system_prompt: the model's system prompt (default :data:`DEFAULT_SYSTEM_PROMPT`; none
            when ``None`` or empty).
        durability: the default checkpoint durability of every run (``"sync"``: a step's
            checkpoint is written before the next step starts); a run's own ``durability=``
            wins. Without a checkpointer none is set.
        step_limit: the default ``recursion_limit``; a run that reaches it ends with
            :data:`STEP_LIMIT_MESSAGE` instead of ``GraphRecursionError``.
        authorize_operator: ``(identity, gate, config) -> bool``, who may answer an escalation.
        always_include: see :func:`build_governed_graph`.
        usage: see :func:`build_governed_graph`.
        embeddings: see :func:`build_governed_graph`.
        name: the compiled graph's name.

    Returns:
        The compiled governed graph.

    Raises:
        ValueError: a malformed argument (``step_limit`` below 4, ``connection=`` together
            with ``base_url`` / ``api_key`` / ``operator_api_key`` / ``extra_servers``, and
            those of :func:`build_governed_graph`).
        EngineConnectionError: the engine could not be reached.
        ModelSetupError: the model string could not be turned into a chat model.
    """
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
    stack = contextlib.AsyncExitStack()
    try:
        if checkpointer is not None and not _is_saver(checkpointer):
            from algenta_graph.serving.checkpointer import open_checkpointer

            checkpointer = await stack.enter_async_context(open_checkpointer(checkpointer))
        if connection is None:
            from algenta_graph.connection.engine import EngineConnection

            connection = EngineConnection(
                base_url,
                api_key=api_key,
                operator_api_key=operator_api_key,
                profile=profile or "observe",
                extra_servers=extra_servers,
            )
            await connection.open()
            stack.push_async_callback(connection.aclose)
            profile = None  # the connection's own profile
        graph = build_governed_graph(
            connection,
            model,
            top_k=top_k,
            on_denial=on_denial,
            system_prompt=system_prompt,
            authorize_operator=authorize_operator,
            always_include=always_include,
            usage=usage,
            embeddings=embeddings,
        )
        compiled = graph.compile(checkpointer=checkpointer, name=name)
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
    except BaseException:
        await stack.aclose()
        raise
    _OWNED[compiled] = stack
    return compiled


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
