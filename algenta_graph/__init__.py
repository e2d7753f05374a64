"""algenta-graph: a prebuilt, compiled LangGraph graph for governed agents."""

from __future__ import annotations

__version__ = "0.1.0"
