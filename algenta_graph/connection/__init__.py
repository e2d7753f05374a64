"""One connection to an Algenta engine: the MCP transport, the governed catalog, the outcomes.

- :mod:`~algenta_graph.connection.transport`: persistent MCP sessions and their typed errors;
- :mod:`~algenta_graph.connection.client`: :class:`EngineClient`, what the graph needs of a
  connection, and the engine's tool names;
- :mod:`~algenta_graph.connection.catalog`: the governed catalog built from the tool lists;
- :mod:`~algenta_graph.connection.engine`: :class:`EngineConnection` (the sessions, the model's
  calls, the operator path);
- :mod:`~algenta_graph.connection.outcomes`: receipts, denials, failures and the one parser.
"""

from algenta_graph.connection.client import EngineClient
from algenta_graph.connection.engine import EngineConnection

__all__ = ["EngineClient", "EngineConnection"]
