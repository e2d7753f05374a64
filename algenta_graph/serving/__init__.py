"""Serving the graph with ``langgraph dev`` or any LangGraph server.

- :mod:`~algenta_graph.serving.server`: the graph factory ``langgraph.json`` names;
- :mod:`~algenta_graph.serving.auth`: custom auth (tokens, roles, thread ownership);
- :mod:`~algenta_graph.serving.checkpointer`: where checkpoints live (SQLite, PostgreSQL).
"""
