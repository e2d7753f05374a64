"""The Algenta HTTP API of the reference engine, one module per group of routes.

Decision cases, analysis runs and action plans (:mod:`.cases`), the out-of-band approval of a
plan (:mod:`.approvals`), the execution of a plan and executions (:mod:`.executions`), replay
manifests and replays (:mod:`.replay`), the audit export (:mod:`.audit`); :mod:`.common` is what
they share, :mod:`.app` the ASGI app of them all.

One engine over one store with the MCP tools: a plan proposed here is a plan proposal like
``plan_decision``'s (the governed graph can execute its decision over MCP with its nonce), and a
decision executed either way counts for the idempotency gate the other way.

Every answer is JSON; every refusal is ``{"error": {"code", "message", ...}}`` with a 4xx status
(a failed delivery of an execution: 502 / 504 with ``retryable``), never a traceback, and bad
input writes nothing. A request presents its API key as ``Authorization: Bearer <token>`` or
``X-API-Key: <token>`` (same keys, same roles). The routes, their codes and what the reference
engine chose where the public runner and the contract are silent are in
``algenta_graph/engine/README.md``, "The Algenta HTTP API".
"""
