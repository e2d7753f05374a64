"""The factory: ``create_governed_agent`` (and ``governed_agent``), the compiled, owned graph.

It reads the one configuration (:class:`~algenta_graph.config.AgentConfig`, or a file's path),
resolves its secrets and imports off the event loop, chooses the graph's ledger
(:mod:`algenta_graph.ledger`: the one every process serving the graph shares, from the
configuration, or a :class:`~algenta_graph.errors.LedgerRequired` naming what to set), opens
the checkpointer, the ledger and the engine connection it owns
(:mod:`algenta_graph.graph.connecting`), builds the tool index, assembles the graph
(:func:`~algenta_graph.graph.assembly.build_governed_graph`) and gives every governance node the
ledger, compiles it with the run defaults (profile, durability, ``recursion_limit``), makes
every resume take effect or be refused (:mod:`algenta_graph.graph.resumes`) and instruments it;
closing it (:func:`aclose_governed_agent`) closes what it opened. It wires no node itself.
Every option that makes sense outside Python code is also a key of the configuration, which the
served graph is built from too (:mod:`algenta_graph.serving.server`): its arguments win over it,
and both ways share its defaults.

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

    # gates on your own tools, no engine: base_url=None (the file's base_url = false)
    graph = await create_governed_agent(
        base_url=None,
        extra_servers={"crm": {"transport": "streamable_http", "url": "http://127.0.0.1:9000/mcp"}},
        tool_gates={"require_approval": ["crm.delete_customer"]},
        checkpointer="r.sqlite",
    )
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import os
import weakref
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableConfig
from typing_extensions import TypeIs

from algenta_graph._langgraph import default_durability
from algenta_graph.config import (
    NO_ENGINE_SYSTEM_PROMPT,
    AgentConfig,
    load_config,
    resolve_config,
)
from algenta_graph.governance.contract import resolve_profile
from algenta_graph.governance.escalations import EscalationSettings
from algenta_graph.governance.tool_gates import ToolGates, parse_tool_gates
from algenta_graph.graph.assembly import build_governed_graph
from algenta_graph.graph.connecting import (
    EngineURL,
    check_tool_sources,
    open_engine_connection,
    without_lost_tools,
)
from algenta_graph.graph.resumes import check_resumes
from algenta_graph.ledger import MEMORY, LedgerSpec, choose_ledger, connect_ledger
from algenta_graph.nodes.operators import AuthorizeOperator
from algenta_graph.telemetry.handler import instrument

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings
    from langchain_core.tools import BaseTool
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.graph.state import CompiledStateGraph
    from langgraph.store.base import BaseStore

    from algenta_graph.connection.engine import EngineConnection
    from algenta_graph.retrieval import ToolIndex
    from algenta_graph.retrieval.usage import UsageSignal

__all__ = ["aclose_governed_agent", "build_index", "create_governed_agent", "governed_agent"]


_OWNED: weakref.WeakKeyDictionary[Any, contextlib.AsyncExitStack] = weakref.WeakKeyDictionary()


class _Configured(enum.Enum):
    """``base_url`` not given: the configuration's (``None`` given says there is no engine)."""

    BASE_URL = "the configuration's base_url"


CONFIGURED = _Configured.BASE_URL
"""``create_governed_agent``'s ``base_url`` default: the configuration's engine."""


async def create_governed_agent(
    model: BaseChatModel | str | None = None,
    *,
    config: AgentConfig | str | os.PathLike[str] | None = None,
    base_url: str | Literal[_Configured.BASE_URL] | None = CONFIGURED,
    api_key: str | None = None,
    operator_api_key: str | None = None,
    operator_key_is_agent_key: bool | None = None,
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
    ledger: LedgerSpec | None = None,
    single_process: bool | None = None,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Connect to the engine (if any) and the extra servers, list their tools, return the graph.

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
            :class:`~algenta_graph.connection.engine.EngineConnection`); default the
            configuration's (``ALGENTA_BASE_URL``, else ``http://localhost:8000/mcp``).
            ``None``: **no Algenta engine**: the graph serves the ``extra_servers``' tools with
            retrieval, ``search_tools`` and every graph-side gate (``tool_gates``: approval,
            budgets, argument rules, postures), its escalations, records and ledger; the
            engine's gates (``idempotency``, ``confidence``, ``risk_floor``) do not exist there,
            and nothing connects to an engine (the configuration's ``base_url = false``).
        api_key: the engine's API token (see
            :class:`~algenta_graph.connection.engine.EngineConnection`).
        operator_api_key: the engine credential of the operator path alone (an engine key
            with the operator role; default ``ALGENTA_OPERATOR_API_KEY``): the override flags
            are sent with it, the model's calls never are.
        operator_key_is_agent_key: without ``operator_api_key``, ``True`` says the engine takes
            ``api_key`` as the operator credential too (a relaxed local engine); otherwise an
            override is refused, never sent over the model's session (default the
            configuration's, ``False``).
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
            with :data:`~algenta_graph.nodes.agent.STEP_LIMIT_MESSAGE` instead of
            ``GraphRecursionError``.
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
        ledger: the ledger every process serving the graph shares: escalation claims, notices
            and the write-ahead of every governed call (:mod:`algenta_graph.ledger`). A
            :class:`~algenta_graph.ledger.Ledger` (the caller closes it), ``"memory"``, a SQLite
            file path or a ``postgresql://`` URL (opened here, closed with the graph). Default
            the configuration's ``ledger`` (``ALGENTA_LEDGER``), else the checkpointer's own
            database when it is given as a path or URL (or a saver
            :func:`~algenta_graph.serving.checkpointer.open_checkpointer` opened from one), else
            this process's memory for an ``InMemorySaver`` or no checkpointer. Any other saver
            needs one (or ``single_process``): the graph is not built without it.
        single_process: the deployment is one process (default the configuration's
            ``single_process``, ``ALGENTA_SINGLE_PROCESS``): with no ledger configured or
            implied, this process's memory is its ledger (a restart forgets it).

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
        NoToolServers: no engine (``base_url=None``, ``base_url = false``) and no extra
            server; nothing was opened.
        ConfigError: the configuration is wrong (a secret missing from the environment, an
            import path that does not import, ...), every problem named.
        LedgerRequired: no ledger is configured or implied (a saver algenta-graph did not
            open from a path or URL) and the deployment is not declared one process.
        LedgerError: the ledger's database could not be opened.
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
        base_url is not CONFIGURED
        or api_key is not None
        or operator_api_key is not None
        or operator_key_is_agent_key is not None
        or extra_servers is not None
    ):
        raise ValueError(
            "pass either connection= or base_url/api_key/operator_api_key/"
            "operator_key_is_agent_key/extra_servers, not both"
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
    engine_url: EngineURL = (
        cfg.base_url if base_url is CONFIGURED else (False if base_url is None else base_url)
    )
    servers = extra_servers if extra_servers is not None else resolved.extra_servers
    if connection is None:  # before anything is opened, as the ledger below
        check_tool_sources(
            engine_url,
            servers,
            no_engine=(
                "base_url=None"
                if base_url is None
                else f"base_url = false ({cfg.source_of('base_url')})"
            ),
        )
    implied, deployment = _implied_ledger(checkpointer)
    chosen = choose_ledger(
        ledger if ledger is not None else resolved.ledger,
        implied=implied,
        deployment=deployment,
        single_process=cfg.single_process if single_process is None else single_process,
    )  # before anything is opened: a deployment without a shared ledger does not start
    stack = contextlib.AsyncExitStack()
    try:
        if checkpointer is not None and not _is_saver(checkpointer):
            from algenta_graph.serving.checkpointer import open_checkpointer

            checkpointer = await stack.enter_async_context(open_checkpointer(checkpointer))
        # closed by a callback, never by a context's finaliser: a copy of the compiled graph
        # (with_config, instrument) outlives the stack's key, and its nodes hold the ledger
        the_ledger, opened = await connect_ledger(chosen)
        if opened:
            stack.push_async_callback(the_ledger.aclose)
        if connection is None:
            connection = await open_engine_connection(
                cfg,
                base_url=engine_url,
                api_key=api_key if api_key is not None else resolved.api_key,
                operator_api_key=(
                    operator_api_key if operator_api_key is not None else resolved.operator_api_key
                ),
                operator_key_is_agent_key=(
                    cfg.operator_key_is_agent_key
                    if operator_key_is_agent_key is None
                    else operator_key_is_agent_key
                ),
                profile=profile or cfg.profile,
                extra_servers=servers,
            )
            stack.push_async_callback(connection.aclose)
            profile = None  # the connection's own profile
        elif profile is None and "profile" in cfg.model_fields_set:
            profile = cfg.profile  # a configured profile narrows the caller's connection
        base_tools = cfg.always_include if always_include is None else always_include
        base_tools = without_lost_tools(base_tools, connection)
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
            system_prompt=_system_prompt(cfg, system_prompt, connection.has_engine),
            authorize_operator=(
                authorize_operator
                if authorize_operator is not None
                else resolved.authorize_operator
            ),
            always_include=base_tools,
            usage=usage,
            escalation=escalation if escalation is not None else resolved.escalation,
            tool_gates=compiled_gates,
            ledger=the_ledger,
        )
        compiled = graph.compile(checkpointer=checkpointer, store=store, name=name or cfg.name)
        compiled = check_resumes(compiled)
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
        compiled = instrument(compiled, capture_content=cfg.telemetry.capture_content)
    except BaseException:
        await stack.aclose()
        raise
    _OWNED[compiled] = stack
    return compiled


def _implied_ledger(
    checkpointer: BaseCheckpointSaver[Any] | str | Path | None,
) -> tuple[str | None, str]:
    """The ledger the checkpointer's configuration implies, and what the deployment is.

    The database a path or URL names (or the one
    :func:`~algenta_graph.serving.checkpointer.open_checkpointer` opened a saver from); this
    process's memory for no checkpointer or an ``InMemorySaver`` itself (never a subclass: it
    could keep its state anywhere); none for any other saver.
    """
    if checkpointer is None:
        return MEMORY, "a graph without a checkpointer"
    if not _is_saver(checkpointer):
        return os.fspath(checkpointer), "the checkpointer's database"
    from langgraph.checkpoint.memory import InMemorySaver

    from algenta_graph.serving.checkpointer import database_of

    opened = database_of(checkpointer)
    if opened is not None:
        return opened, "the checkpointer's database"
    if type(checkpointer) is InMemorySaver:
        return MEMORY, "an InMemorySaver"
    return None, (
        f"the checkpointer {type(checkpointer).__name__} (a saver algenta-graph did not open from "
        "a path or URL, whose state may be shared by other processes)"
    )


def _system_prompt(config: AgentConfig, given: str | None, has_engine: bool) -> str:
    """The system prompt: the argument, else the configured one, else the default.

    A graph without an engine is never told of ``execute_decision`` and the engine's gates.
    """
    if given is not None:
        return given
    if has_engine or "system_prompt" in config.model_fields_set:
        return config.system_prompt
    return NO_ENGINE_SYSTEM_PROMPT


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
