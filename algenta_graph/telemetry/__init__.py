"""One trace from retrieval to the engine's receipt: OpenTelemetry spans and metrics.

- :mod:`~algenta_graph.telemetry.names`: every span, attribute, metric and LangSmith key;
- :mod:`~algenta_graph.telemetry.instruments`: :class:`Telemetry`, the tracer and instruments;
- :mod:`~algenta_graph.telemetry.handler`: :func:`instrument` and :class:`TelemetryHandler`,
  the spans of the graph's runs, nodes and model calls, and the metrics of its records;
- :mod:`~algenta_graph.telemetry.records`: what a node's input and update say;
- :mod:`~algenta_graph.telemetry.runs`: the runs and their spans (the engine calls' parents);
- :mod:`~algenta_graph.telemetry.engine_calls`: one engine call, traced, with its
  ``traceparent``;
- :mod:`~algenta_graph.telemetry.otlp`: :func:`configure_otlp`, the SDK and the OTLP exporter
  (the ``otlp`` extra).

Only ``opentelemetry-api`` is needed: without a configured SDK every span and metric is a
no-op and nothing is exported. Names are imported lazily (the connection imports
:mod:`~algenta_graph.telemetry.engine_calls` alone).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "instrument": "algenta_graph.telemetry.handler",
    "TelemetryHandler": "algenta_graph.telemetry.handler",
    "Telemetry": "algenta_graph.telemetry.instruments",
    "configure_otlp": "algenta_graph.telemetry.otlp",
}

__all__ = ["Telemetry", "TelemetryHandler", "configure_otlp", "instrument"]

if TYPE_CHECKING:
    from algenta_graph.telemetry.handler import TelemetryHandler, instrument
    from algenta_graph.telemetry.instruments import Telemetry
    from algenta_graph.telemetry.otlp import configure_otlp


def __getattr__(name: str) -> Any:
    """Import a public name on first use."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
