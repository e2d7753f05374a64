"""One connection to an Algenta engine: the MCP transport, the governed catalog, the outcomes.

- :mod:`~algenta_graph.connection.transport`: persistent MCP sessions and their typed errors;
- :mod:`~algenta_graph.connection.engine`: :class:`EngineConnection` (the catalog, the model's
  calls, the operator path) and :class:`EngineClient`, what the graph needs of one;
- :mod:`~algenta_graph.connection.outcomes`: receipts, denials, failures and the one parser.
"""

from algenta_graph.connection.engine import EngineClient, EngineConnection

__all__ = ["EngineClient", "EngineConnection"]
