"""Who may use the LangGraph server's store (``/store/...``) on the served graph.

Registered on the one :data:`~algenta_graph.serving.auth.auth` object (the served graph's auth
imports this module). Today the store is closed to every authenticated caller, as every resource
without a handler of its own is (``docs/ARCHITECTURE.md``, the security model): the graph's own
writes do not pass through the API's auth. Without an auth file the server runs open.
"""

from __future__ import annotations

from typing import Any

from langgraph_sdk import Auth

from algenta_graph.serving.auth import auth, forbidden, principal_of

__all__: list[str] = []


@auth.on.store
async def _store(ctx: Auth.types.AuthContext, value: Any) -> None:
    """Refuse every store operation to every authenticated caller.

    The server's own graph writes to its store directly, not through the API.
    """
    if principal_of(ctx) is None:
        return
    raise forbidden(f"store.{ctx.action} is not allowed on this server")
