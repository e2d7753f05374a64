"""Moved to :mod:`algenta_graph.serving.auth`.

This path keeps ``langgraph.json`` files that name ``algenta_graph.auth:auth`` working.
"""

from algenta_graph.serving.auth import auth

__all__ = ["auth"]
