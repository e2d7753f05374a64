"""Render ``docs/graph.png`` offline with Graphviz, from the real graph builder.

The picture depends only on the graph's nodes and edges, not on an engine's catalog, so the
builder is given an empty offline catalog (``algenta_graph.testing.OfflineConnection``). The
same drawing as Mermaid text is ``docs/graph.mmd``, held against the builder by
``tests/integration/test_graph.py`` (no engine needed). LangGraph draws one edge per (source,
target) pair with one label; here the labels of every branch between two nodes are merged (``ok
/ failed``).

Needs Graphviz and pygraphviz (``apt-get install graphviz libgraphviz-dev && pip install
pygraphviz``); run ``python docs/render_graph.py``.
"""

from collections import defaultdict
from pathlib import Path

import pygraphviz as pgv

from algenta_graph.graph import build_governed_graph
from algenta_graph.models import DemoChatModel
from algenta_graph.testing import OfflineConnection

builder = build_governed_graph(OfflineConnection(), DemoChatModel())
drawable = builder.compile(name="governed_agent").get_graph()

labels: dict[tuple[str, str], list[str]] = defaultdict(list)
conditional: dict[tuple[str, str], bool] = {}
for source, branches in builder.branches.items():
    for branch in branches.values():
        for key, target in (branch.ends or {}).items():
            labels[(source, target)].append(key)
for edge in drawable.edges:
    pair = (edge.source, edge.target)
    conditional[pair] = edge.conditional
    labels.setdefault(pair, [])
    if edge.data and edge.data not in labels[pair]:
        labels[pair].append(str(edge.data))

g = pgv.AGraph(directed=True, rankdir="TB", nodesep="0.5", ranksep="0.55", fontname="Helvetica")
g.node_attr.update(
    shape="box",
    style="rounded,filled",
    fontname="Helvetica",
    fontsize="13",
    fillcolor="#eef3fb",
    color="#4a6fa5",
    penwidth="1.3",
    margin="0.18,0.08",
)
g.edge_attr.update(fontname="Helvetica", fontsize="11", color="#555555", fontcolor="#333333")
for node in drawable.nodes:
    attrs = {}
    if node in ("__start__", "__end__"):
        attrs = {
            "shape": "oval",
            "fillcolor": "#dddddd",
            "color": "#777777",
            "label": node.strip("_").upper(),
        }
    elif node.startswith("denial_handler"):
        attrs = {"fillcolor": "#fdecea", "color": "#b0413e"}
    elif node == "governed_tool":
        attrs = {"fillcolor": "#fff4d6", "color": "#b8860b"}
    g.add_node(node, **attrs)
for (source, target), keys in sorted(labels.items()):
    attrs = {"style": "dashed" if conditional.get((source, target), True) else "solid"}
    if keys:
        attrs["label"] = " " + " / ".join(keys) + " "
    g.add_edge(source, target, **attrs)
g.layout(prog="dot")
g.draw(str(Path(__file__).with_name("graph.png")), format="png", args="-Gdpi=110")
