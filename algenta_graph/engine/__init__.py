"""The local reference engine: a real Algenta-compatible MCP engine for development and tests.

- :class:`ReferenceEngine`: FastMCP over streamable HTTP, SQLite state, policy gates, real
  webhook POSTs, the full tool registry advertised, the operator approval API over HTTP, and an
  exclusive lock on its database file.
- :class:`WebhookReceiver`: a real HTTP server recording the webhooks it receives;
  :class:`SilentHost`: a port that never answers (a timing-out upstream).

The engine also speaks the Algenta HTTP API at ``/v1`` (decision cases, analysis runs, action
plans, approval and execution of a plan, executions and their replay, the audit export): one
engine over one store with the MCP tools.

``relaxed=True`` keeps only the three gates on ``execute_decision``; ``relaxed=False`` (strict)
enforces the execute profile's ``requires_all_of``. The client protocol (what ``execute_decision``
needs in strict mode, where the nonce comes from, how an operator approves a plan, the delivery
outcomes ``delivered`` / ``failed`` / ``unknown``) is in ``algenta_graph/engine/README.md``. In
short, strict ``execute_decision`` takes two more arguments, both required and supplied by the
graph, never by the model:

- ``idempotency_key``: the caller's key for this attempt (the graph: thread + tool call id); a
  repeated key returns the first attempt's receipt and sends nothing;
- ``nonce``: the single-use nonce of the plan the decision is bound to
  (``log_decision(..., plan_id=...)``; ``get_decision`` shows it); that plan must have been
  approved by an operator with ``POST /v1/decision-plans/{plan_id}/approve``
  ``{"plan_hash", "nonce"}``.

``force`` / ``override_safety`` are accepted only from an operator key with execute enabled
(whenever the engine has keys): the model-facing agent key cannot override.

>>> from algenta_graph.engine import ReferenceEngine, WebhookReceiver
>>> with ReferenceEngine() as engine, WebhookReceiver() as hook:      # doctest: +SKIP
...     ...  # connect any MCP client to engine.url; execute_decision(..., webhook_url=hook.url)
"""

from __future__ import annotations

from algenta_graph.engine.auth import ApiKey, KeyFileError, KeyRing
from algenta_graph.engine.contract import DEFAULT_RELAXED
from algenta_graph.engine.dblock import DatabaseInUse
from algenta_graph.engine.mcp_server import DENIAL_FORMS
from algenta_graph.engine.server import ReferenceEngine
from algenta_graph.engine.webhook import SilentHost, WebhookReceiver, read_log

__all__ = [
    "DEFAULT_RELAXED",
    "DENIAL_FORMS",
    "ApiKey",
    "DatabaseInUse",
    "KeyFileError",
    "KeyRing",
    "ReferenceEngine",
    "SilentHost",
    "WebhookReceiver",
    "read_log",
]
