"""The governed graph assembled: its nodes and their edges, uncompiled (``build_governed_graph``).

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
:mod:`algenta_graph.topology`. This module wires them over an **open** connection and checks
the options that shape the graph; it opens nothing, compiles nothing and reads no configuration
(that is :mod:`algenta_graph.graph.factory`).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.language_models import BaseChatModel
from langgraph.graph import END, START, StateGraph

from algenta_graph.config import DEFAULT_SYSTEM_PROMPT, DEFAULT_TOP_K
from algenta_graph.connection.catalog import gate_catalog
from algenta_graph.governance.escalations import EscalationSettings
from algenta_graph.governance.gates import DEFAULT_POLICIES, parse_on_denial
from algenta_graph.governance.run_settings import GraphSettings, RunContext
from algenta_graph.governance.tool_gates import (
    CompiledGates,
    ToolGates,
    ToolRef,
    parse_tool_gates,
)
from algenta_graph.graph.connecting import unreachable_of
from algenta_graph.models import resolve_model
from algenta_graph.nodes.agent import AgentNodes
from algenta_graph.nodes.denial_handler import DenialHandler, route_pending_escalation
from algenta_graph.nodes.executor import DecisionExecutor
from algenta_graph.nodes.governed_tool import GovernedToolNode
from algenta_graph.nodes.operators import AuthorizeOperator
from algenta_graph.retrieval.catalog import GovernedCatalog
from algenta_graph.state import GovernedInput, GovernedState
from algenta_graph.topology import (
    GOVERNED_TOOL_NODE,
    HALT,
    MODEL_NODE,
    RETRIEVE_NODE,
    UNFINISHED_STEP,
    gates_of,
    handler_node_name,
    pending_route,
)

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

    from algenta_graph.connection.client import EngineClient
    from algenta_graph.ledger import Ledger
    from algenta_graph.retrieval import ToolIndex
    from algenta_graph.retrieval.usage import UsageSignal

__all__ = ["build_governed_graph"]


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
    ledger: Ledger | None = None,
) -> StateGraph[Any, Any, Any, Any]:
    """Build the governed graph (uncompiled) over an **open** connection.

    The catalog (``connection.tools``) and the BM25 index over it are built here, once. Compile
    it yourself with any checkpointer; consider ``durability="sync"`` when invoking (see
    :func:`create_governed_agent`).

    Args:
        connection: the open engine connection
            (:class:`~algenta_graph.connection.client.EngineClient`).
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
            rules, each server's posture for its unlisted tools. Default: none (a tool its
            server marks ``destructiveHint: true`` is still held for an operator). Every rule
            is resolved against the connection's catalog here; each escalation's digest binds
            the rules in force for its tool and the gate's policy.
        ledger: an open :class:`~algenta_graph.ledger.Ledger` every process serving the graph
            shares (``async with open_ledger("ledger.sqlite") as ledger``; the caller closes
            it): escalation claims, notices and the write-ahead of every governed call.
            Without one, a run may use this process's own only when it has no checkpointer or
            an ``InMemorySaver``; a run on any other saver is refused with
            :class:`~algenta_graph.errors.LedgerRequired` before anything is sent.

    Returns:
        The uncompiled ``StateGraph``.

    Raises:
        ValueError: ``top_k`` is not an int >= 1, ``on_denial`` or ``tool_gates`` is
            malformed (a predicate that does not import is named with its rule), ``index`` and
            ``embeddings`` are both given (pass ``embeddings=`` to the ``ToolIndex``), or
            ``always_include`` names a tool the catalog does not show.
        ToolGatesError: a tool-gate rule does not resolve against the catalog (a pattern that
            names no tool, with the nearest tool names; every problem named).
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
    # every rule resolves against the live catalog, or nothing is built (invariant 19)
    gates = tool_gates.resolved(gate_catalog(connection, unreachable=unreachable_of(connection)))
    # without an engine its gates do not exist: no handler, no edge (nothing could take them)
    gate_names = gates_of(connection.has_engine)

    def rules_in_force(gate: str, tool: ToolRef) -> dict[str, Any]:
        return gates.in_force(tool, policies[gate])

    asking = (escalation or EscalationSettings()).model_copy(
        update={"rules_in_force": rules_in_force}
    )
    tools = GovernedToolNode(
        catalog, executor, built, gates if gates.active else None, ledger=ledger
    )
    nodes = AgentNodes(catalog, built, system_prompt)
    graph: StateGraph[Any, Any, Any, Any] = StateGraph(
        GovernedState, context_schema=RunContext, input_schema=GovernedInput
    )
    graph.add_node(RETRIEVE_NODE, nodes.retrieve_tools)
    graph.add_node(MODEL_NODE, nodes.call_model)
    graph.add_node(GOVERNED_TOOL_NODE, tools)
    for gate in gate_names:
        destinations: dict[str, str] = {MODEL_NODE: "resolved", END: "halt"}
        destinations.update({handler_node_name(g): f"then {g}" for g in gate_names if g != gate})
        graph.add_node(
            handler_node_name(gate),
            DenialHandler(
                gate,
                executor,
                authorize_operator=authorize_operator,
                settings=asking,
                tool_gates=gates,
                ledger=ledger,
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
    after_retrieval.update({pending_route(g): handler_node_name(g) for g in gate_names})
    graph.add_conditional_edges(RETRIEVE_NODE, route_pending_escalation, after_retrieval)
    graph.add_conditional_edges(
        MODEL_NODE, nodes.route_after_model, {"tool_calls": GOVERNED_TOOL_NODE, "answer": END}
    )
    # one edge per (source, target) is drawn, labelled by the first key: "ok" shows for model
    path_map: dict[Hashable, str] = {"ok": MODEL_NODE, "failed": MODEL_NODE}
    path_map.update({gate: handler_node_name(gate) for gate in gate_names})
    path_map[HALT] = END
    graph.add_conditional_edges(GOVERNED_TOOL_NODE, tools.route, path_map)
    return graph
