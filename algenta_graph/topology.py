"""The governed graph's node names and route labels, one definition of each.

They are read by the factory, the nodes, the record guard, the console and Studio's drawing.

::

    START -> retrieve_tools -> model --(no tool call)--> END
                  |              |  (tool calls)
                  |              v
                  |        governed_tool --(ok / failed)--> model
                  |          |--(<gate>)--> denial_handler_<gate> --> next handler | model | END
                  |          '--(halt)--> END
                  |--(<gate> pending)--> denial_handler_<gate>   (invariant 12)
                  '--(unfinished step)--> governed_tool           (invariant 13)

>>> handler_node_name("confidence")
'denial_handler_confidence'
>>> GOVERNANCE_NODES[0]
'governed_tool'
"""

from __future__ import annotations

from algenta_graph.governance.gates import GATE_NAMES, GRAPH_GATE_NAMES

__all__ = [
    "DENIAL_HANDLER_NODES",
    "GOVERNANCE_NODES",
    "GOVERNED_TOOL_NODE",
    "HALT",
    "MODEL_NODE",
    "RETRIEVE_NODE",
    "UNFINISHED_STEP",
    "gates_of",
    "handler_node_name",
    "pending_route",
]

RETRIEVE_NODE = "retrieve_tools"
"""Retrieval: the turn's tools, from the catalog's index."""
MODEL_NODE = "model"
"""The chat model, bound to the selected tools."""
GOVERNED_TOOL_NODE = "governed_tool"
"""The node that runs the model's tool calls under governance."""


def handler_node_name(gate: str) -> str:
    """The node that applies the policy for ``gate``: ``denial_handler_<gate>``."""
    return f"denial_handler_{gate}"


def gates_of(has_engine: bool) -> tuple[str, ...]:
    """The gates a graph has a handler (and an edge) for.

    Every gate, or without an engine the graph's own (``approval``, ``budget``, ``arguments``):
    the engine's do not exist there.

    >>> gates_of(False)
    ('approval', 'budget', 'arguments')
    """
    return GATE_NAMES if has_engine else GRAPH_GATE_NAMES


DENIAL_HANDLER_NODES: tuple[str, ...] = tuple(handler_node_name(g) for g in GATE_NAMES)
"""One denial handler node per gate."""
GOVERNANCE_NODES: tuple[str, ...] = (GOVERNED_TOOL_NODE, *DENIAL_HANDLER_NODES)
"""The nodes whose work is governed (executions, escalations, records): only a run enters
them, never an ``update_state`` from outside (:mod:`algenta_graph.governance.record_guard`)."""

HALT = "halt"
"""The route of a step the graph must end: a halting policy, or a gate it does not know."""
UNFINISHED_STEP = "unfinished step"
"""The route of a new turn whose thread has a governed step that never finished."""


def pending_route(gate: str) -> str:
    """The route of a new turn on a thread waiting for ``gate``'s operator: ``"<gate> pending"``."""
    return f"{gate} pending"
