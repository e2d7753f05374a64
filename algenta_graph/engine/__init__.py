"""The local reference engine: a real Algenta-compatible MCP engine for development and tests.

- :class:`ReferenceEngine`: FastMCP over streamable HTTP, SQLite state, policy gates, real
  webhook POSTs, the full tool registry advertised.
- :class:`WebhookReceiver`: a real HTTP server recording the webhooks it receives.

>>> from algenta_graph.engine import ReferenceEngine, WebhookReceiver
>>> with ReferenceEngine() as engine, WebhookReceiver() as hook:      # doctest: +SKIP
...     ...  # connect any MCP client to engine.url; execute_decision(..., webhook_url=hook.url)
"""

from __future__ import annotations

from algenta_graph.engine.server import DENIAL_FORMS, ReferenceEngine
from algenta_graph.engine.webhook import WebhookReceiver, read_log

__all__ = ["DENIAL_FORMS", "ReferenceEngine", "WebhookReceiver", "read_log"]
