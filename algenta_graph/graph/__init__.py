"""The governed graph's factory: assembled (``build_governed_graph``), compiled and owned.

``create_governed_agent`` / ``governed_agent`` (:mod:`~algenta_graph.graph.factory`) open what
the graph needs and return it compiled; ``build_governed_graph``
(:mod:`~algenta_graph.graph.assembly`) wires the nodes over an open connection; opening the
engine connection and its extra servers is :mod:`~algenta_graph.graph.connecting`. These are
the package's public names (``algenta_graph`` imports them from here, lazily); the nodes
themselves are :mod:`algenta_graph.nodes`. The whole design is in ``docs/ARCHITECTURE.md``.
"""

from __future__ import annotations

from algenta_graph.graph.assembly import build_governed_graph
from algenta_graph.graph.factory import (
    aclose_governed_agent,
    create_governed_agent,
    governed_agent,
)

__all__ = [
    "aclose_governed_agent",
    "build_governed_graph",
    "create_governed_agent",
    "governed_agent",
]
