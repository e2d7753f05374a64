"""The governed graph's shape, drawn readably: the main loop, and the denial routes.

LangGraph draws every (source, target) pair of the graph: with one denial handler per gate,
each able to pass a step to any other gate's handler, that is some sixty edges, most of them
between handlers. Here the same routes are read off the real graph (:func:`routes`) and drawn
twice, so that nothing is left out and the shape shows:

- :func:`main_loop`: every ``denial_handler_<gate>`` node as one box, its routes merged
  (``<gate>`` stands for the gate's name in a label): a dozen edges;
- :func:`denial_routes`: the handlers one by one, how a step reaches each of them, and where
  they send it (the routes every handler shares are drawn once, from the group).

Each is a :class:`Picture`: Graphviz DOT (:meth:`Picture.dot`, rendered to PNG by Debian's
``graphviz``, ``docs/render_graph.py``) and text lines (:meth:`Picture.lines`).

>>> from algenta_graph.graph import build_governed_graph
>>> from algenta_graph.testing import OfflineConnection
>>> picture = main_loop(build_governed_graph(OfflineConnection()))
>>> for line in picture.lines()[:2]:
...     print(line)
START                 --> retrieve_tools
retrieve_tools        --(model)--> model
>>> len(picture.edges)
12
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from algenta_graph.governance.gates import ENGINE_GATE_NAMES, GATE_NAMES, GRAPH_GATE_NAMES
from algenta_graph.topology import (
    DENIAL_HANDLER_NODES,
    GOVERNED_TOOL_NODE,
    MODEL_NODE,
    RETRIEVE_NODE,
    handler_node_name,
)

__all__ = ["HANDLERS", "Picture", "Route", "denial_routes", "main_loop", "routes"]

START, END = "__start__", "__end__"
HANDLERS = handler_node_name("<gate>")
"""The box that stands for every ``denial_handler_<gate>`` node."""
_GATE = "<gate>"
_NAMES = {START: "START", END: "END"}
_MAIN = {
    (START, RETRIEVE_NODE),
    (RETRIEVE_NODE, MODEL_NODE),
    (MODEL_NODE, GOVERNED_TOOL_NODE),
    (MODEL_NODE, END),
    (GOVERNED_TOOL_NODE, MODEL_NODE),
}
"""The edges of an ordinary turn (drawn solid; every other route is dashed)."""


@dataclass(frozen=True)
class Route:
    """Every way from ``source`` to ``target``: the labels of all its branches."""

    source: str
    target: str
    labels: tuple[str, ...]


def routes(graph: Any) -> list[Route]:
    """Every route of ``graph`` (a ``StateGraph`` builder or a compiled graph), labels merged.

    LangGraph's drawing keeps one label per (source, target); the branches keep them all
    (``ok`` and ``failed`` both go to the model).
    """
    builder = getattr(graph, "builder", graph)
    compiled = graph if hasattr(graph, "get_graph") else builder.compile()
    labels: dict[tuple[str, str], list[str]] = {}
    for source, branches in builder.branches.items():
        for branch in branches.values():
            for key, target in (branch.ends or {}).items():
                labels.setdefault((source, target), []).append(str(key))
    for edge in compiled.get_graph().edges:
        found = labels.setdefault((edge.source, edge.target), [])
        if edge.data and str(edge.data) not in found:
            found.append(str(edge.data))
    return [Route(s, t, tuple(ls)) for (s, t), ls in sorted(labels.items())]


def _group(node: str) -> str:
    return HANDLERS if node in DENIAL_HANDLER_NODES else node


def _general(label: str) -> str:
    """A label with the gate's name as ``<gate>`` (``then confidence`` -> ``then <gate>``)."""
    for gate in sorted(GATE_NAMES, key=len, reverse=True):
        label = re.sub(rf"(?<![\w<]){re.escape(gate)}(?![\w>])", _GATE, label)
    return label


@dataclass(frozen=True)
class Edge:
    """One drawn edge: its label, and whether it is an ordinary turn's or a rarer route."""

    source: str
    target: str
    label: str
    main: bool
    group: bool = False
    """Drawn from (or to) the whole group of handlers rather than one of them."""


@dataclass(frozen=True)
class Picture:
    """A drawing of the graph: its boxes and edges, as Graphviz DOT or as text lines."""

    title: str
    nodes: tuple[str, ...]
    edges: tuple[Edge, ...]
    notes: tuple[str, ...] = ()
    across: bool = False
    """Drawn left to right (the handlers in a column) rather than top to bottom."""

    def lines(self) -> list[str]:
        """One line per edge (``source --(label)--> target``, sources aligned), then the notes."""
        names = [_NAMES.get(e.source, e.source) for e in self.edges]
        width = max(map(len, names))
        out = [
            f"{name:<{width}} {f'--({e.label})-->' if e.label else '-->'} "
            f"{_NAMES.get(e.target, e.target)}"
            for name, e in zip(names, self.edges, strict=True)
        ]
        return out + list(self.notes)

    def dot(self) -> str:
        """The picture in Graphviz's DOT language (``dot -Tpng`` renders it).

        The handlers drawn one by one sit in two boxes, the engine's gates and the graph's; a
        route every handler shares is drawn once, from the group. A route from the group to
        itself (``then <gate>``) is the group's caption.
        """
        out = [
            "digraph governed_agent {",
            f'  label="{self.title}"; labelloc=t; fontname="Helvetica"; fontsize=15;',
            f"  rankdir={'LR' if self.across else 'TB'}; nodesep=0.4; ranksep=0.55;"
            " compound=true; dpi=110;",
            '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=13,'
            ' fillcolor="#eef3fb", color="#4a6fa5", penwidth=1.3, margin="0.18,0.08"];',
            '  edge [fontname="Helvetica", fontsize=11, color="#555555", fontcolor="#333333"];',
        ]
        handlers = [n for n in self.nodes if n in DENIAL_HANDLER_NODES]
        for node in self.nodes:
            if node not in handlers:
                out.append(f"  {_id(node)} [{_node_style(node)}];")
        looping = [e for e in self.edges if e.group and e.source == e.target == HANDLERS]
        if handlers:
            caption = "one denial handler per gate"
            if looping:
                caption += f"; each passes a step on: {looping[0].label}"
            out += [
                "  subgraph cluster_handlers {",
                f'    label="{caption}"; style="rounded,dashed"; color="#b0413e";'
                ' fontcolor="#b0413e"; fontsize=12;',
            ]
            for side, gates in (("engine", ENGINE_GATE_NAMES), ("graph", GRAPH_GATE_NAMES)):
                names = [handler_node_name(g) for g in gates if handler_node_name(g) in handlers]
                out += [
                    f"    subgraph cluster_{side} {{",
                    f'      label="the {side}\'s gates"; style="rounded"; color="#d9a3a1";'
                    ' fontcolor="#7a2f2d"; fontsize=11;',
                    *(f"      {_id(n)} [{_node_style(n)}];" for n in names),
                    "    }",
                ]
            out.append("  }")
        anchor = handlers[len(handlers) // 2] if handlers else HANDLERS
        for e in self.edges:
            if e in looping:
                continue
            attrs = [f'label=" {e.label} "'] if e.label else []
            attrs.append("style=solid, penwidth=1.6" if e.main else "style=dashed")
            source, target = e.source, e.target
            if e.group and source == HANDLERS:
                source = anchor
                attrs.append("ltail=cluster_handlers")
            if e.group and target == HANDLERS:
                target = anchor
                attrs.append("lhead=cluster_handlers")
            out.append(f"  {_id(source)} -> {_id(target)} [{', '.join(attrs)}];")
        out.append("}")
        return "\n".join(out) + "\n"


def _id(node: str) -> str:
    return '"' + node.replace('"', r"\"") + '"'


def _node_style(node: str) -> str:
    if node in (START, END):
        return f'label="{_NAMES[node]}", shape=oval, fillcolor="#dddddd", color="#777777"'
    if node == HANDLERS:
        gates = ", ".join(GATE_NAMES)
        return (
            f'label="denial_handler_<gate>\\n(one per gate: {gates})", fillcolor="#fdecea",'
            ' color="#b0413e"'
        )
    if node in DENIAL_HANDLER_NODES:
        return 'fillcolor="#fdecea", color="#b0413e"'
    if node == GOVERNED_TOOL_NODE:
        return 'fillcolor="#fff4d6", color="#b8860b"'
    return ""


def _merged(found: Iterable[tuple[str, str, str]]) -> dict[tuple[str, str], list[str]]:
    merged: dict[tuple[str, str], list[str]] = {}
    for source, target, label in found:
        labels = merged.setdefault((source, target), [])
        if label not in labels:
            labels.append(label)
    return merged


def _order(nodes: Iterable[str], known: Sequence[str]) -> tuple[str, ...]:
    present = set(nodes)
    return tuple(n for n in known if n in present)


_ORDER = (START, RETRIEVE_NODE, MODEL_NODE, GOVERNED_TOOL_NODE, HANDLERS, *DENIAL_HANDLER_NODES)


def _ranked(pairs: dict[tuple[str, str], list[str]]) -> list[tuple[str, str]]:
    rank = {n: i for i, n in enumerate((*_ORDER, END))}
    return sorted(pairs, key=lambda p: (rank.get(p[0], 99), rank.get(p[1], 99)))


def main_loop(graph: Any) -> Picture:
    """The graph with its denial handlers as one box: every route of it, merged by gate."""
    pairs = _merged(
        (_group(r.source), _group(r.target), _general(label))
        for r in routes(graph)
        for label in (r.labels or ("",))
    )
    edges = tuple(
        Edge(s, t, " / ".join(x for x in pairs[(s, t)] if x), (s, t) in _MAIN)
        for s, t in _ranked(pairs)
    )
    nodes = _order({n for e in edges for n in (e.source, e.target)}, (*_ORDER, END))
    return Picture(
        "the main loop (the denial handlers as one box; <gate> is any gate's name)",
        nodes,
        edges,
        (
            f"{HANDLERS}: one node per gate ({', '.join(GATE_NAMES)}); its policy (report, "
            "escalate, halt) resolves a step back to the model, ends the run, or passes the "
            "step to the next gate's handler",
        ),
    )


def denial_routes(graph: Any) -> Picture:
    """How a step reaches each gate's handler, and where the handlers send it.

    ``governed_tool`` (a step's denial) and ``retrieve_tools`` (a new turn on a thread still
    waiting for an operator) reach each handler by its gate; the routes every handler shares
    (``resolved``, ``halt``, ``then <gate>``) are drawn once, from the group.
    """
    found = routes(graph)
    into: dict[tuple[str, str], list[str]] = {}
    shared: list[tuple[str, str, str]] = []
    for r in found:
        for label in r.labels or ("",):
            if r.target in DENIAL_HANDLER_NODES and r.source == GOVERNED_TOOL_NODE:
                into.setdefault((r.source, r.target), []).append(label)
            elif r.source in DENIAL_HANDLER_NODES or r.target in DENIAL_HANDLER_NODES:
                shared.append((_group(r.source), _group(r.target), _general(label)))
    edges = [Edge(s, t, " / ".join(into[(s, t)]), False) for s, t in _ranked(into)]
    grouped = _merged(shared)
    edges += [
        Edge(s, t, " / ".join(grouped[(s, t)]), False, group=True) for s, t in _ranked(grouped)
    ]
    nodes = _order(
        {n for e in edges for n in (e.source, e.target) if n != HANDLERS}
        | set(DENIAL_HANDLER_NODES),
        (*_ORDER, END),
    )
    return Picture(
        "the denial routes (one handler per gate; the routes they share drawn once)",
        nodes,
        tuple(edges),
        notes=(
            "then <gate>: a handler passes the step to the handler of the next gate with a "
            "denial in it (strictest policy first: halt > escalate > report)",
        ),
        across=True,
    )
