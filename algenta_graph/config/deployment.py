"""Where a LangGraph server keeps the served graph's state, read from the server's environment.

The served graph's ledger (:mod:`algenta_graph.ledger`) follows from it
(:mod:`algenta_graph.serving.server`). What the variables mean is langgraph-api's
(``langgraph_api.config``, ``langgraph_runtime_inmem``): ``langgraph dev`` runs the in-memory
runtime (``LANGGRAPH_RUNTIME_EDITION=inmem``), which flushes its state to ``.langgraph_api/``
under its working directory every few seconds and at exit unless
``LANGGRAPH_DISABLE_FILE_PERSISTENCE`` is true; ``langgraph.json``'s ``checkpointer`` reaches the
server as ``LANGGRAPH_CHECKPOINTER`` (JSON; a ``path`` names a custom checkpointer).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass

from algenta_graph.config.names import ENV_CHECKPOINTER

__all__ = ["DEV_STATE_DIR", "ServedRuntime", "served_runtime"]

DEV_STATE_DIR = ".langgraph_api"
"""Where ``langgraph dev``'s in-memory runtime keeps its state (under its working directory)."""


@dataclass(frozen=True)
class ServedRuntime:
    """What a LangGraph server says about where it keeps the served graph's state."""

    edition: str | None
    """``LANGGRAPH_RUNTIME_EDITION``: ``inmem`` under ``langgraph dev``; ``None`` outside a
    server."""
    checkpointer_path: str | None
    """The custom checkpointer ``langgraph.json`` names (``checkpointer.path``), if any."""
    file_persistence: bool
    """Whether the in-memory runtime keeps its state in :data:`DEV_STATE_DIR` across restarts."""
    algenta_checkpointer: str | None
    """``ALGENTA_CHECKPOINTER``: the database of
    :func:`~algenta_graph.serving.checkpointer.server_checkpointer`."""


def served_runtime(environ: Mapping[str, str] | None = None) -> ServedRuntime:
    """The server's runtime, read from ``environ`` (default ``os.environ``).

    A ``LANGGRAPH_CHECKPOINTER`` that is not a JSON object naming a ``path`` names no custom
    checkpointer we can read: it is kept as its text, so a deployment is never taken for the
    in-memory one by mistake.
    """
    env = os.environ if environ is None else environ
    raw = env.get("LANGGRAPH_CHECKPOINTER", "").strip()
    path: str | None = None
    if raw:
        try:
            parsed = json.loads(raw)
        except ValueError:
            path = raw
        else:
            found = parsed.get("path") if isinstance(parsed, dict) else None
            path = str(found).strip() if found else None
    persistence = env.get("LANGGRAPH_DISABLE_FILE_PERSISTENCE", "false").strip().lower() != "true"
    return ServedRuntime(
        edition=env.get("LANGGRAPH_RUNTIME_EDITION", "").strip() or None,
        checkpointer_path=path or None,
        file_persistence=persistence,
        algenta_checkpointer=env.get(ENV_CHECKPOINTER, "").strip() or None,
    )
