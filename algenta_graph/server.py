"""Moved to :mod:`algenta_graph.serving.server`.

This path keeps ``langgraph.json`` files that name ``algenta_graph.server:make_graph`` working.
"""

from algenta_graph.serving.server import make_graph

__all__ = ["make_graph"]
