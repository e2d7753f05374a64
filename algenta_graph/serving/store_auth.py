"""Who may use the LangGraph server's store (``/store/...``) on the served graph.

:func:`store_rule` is registered on the one :data:`~algenta_graph.serving.auth.auth` object
(``auth.on.store``, by the served graph's auth module). Two rules, in this order:

1. **The graph's own namespace is the graph's alone**, for every caller, with or without an auth
   file: no API request may put, get, delete, search or list under
   :data:`GRAPH_NAMESPACE` (``("algenta_graph", ...)``; the usage signal's history is
   ``("algenta_graph", "usage", <profile>)``, the operator inbox's sessions
   ``("algenta_graph", "inbox_sessions")``), and a search must name a namespace prefix (an
   empty one would reach it). Writes there could poison retrieval for every user or forge an
   operator's session, and its items hold the query terms of other users' turns. The graph
   writes there directly, through ``runtime.store``, and the inbox through the server's own
   store object, never through the API.
2. Beyond it, the store is closed to every authenticated caller, as every resource without a
   handler of its own is (``docs/ARCHITECTURE.md``, the security model). Without an auth file
   the server runs open: the rest of the store is anyone's, as without auth.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langgraph_sdk import Auth

from algenta_graph.retrieval.usage import DEFAULT_NAMESPACE
from algenta_graph.serving.principals import forbidden, principal_of

__all__ = ["GRAPH_NAMESPACE", "store_rule", "touches_graph_namespace"]

GRAPH_NAMESPACE: tuple[str, ...] = DEFAULT_NAMESPACE[:1]
"""The store namespace prefix only the graph itself uses (``("algenta_graph",)``)."""


def touches_graph_namespace(action: str, namespace: Sequence[str] | None) -> bool:
    """Whether a store request (its action, its namespace or prefix) could reach the graph's.

    >>> touches_graph_namespace("put", ("algenta_graph", "usage", "execute"))
    True
    >>> touches_graph_namespace("search", ()), touches_graph_namespace("put", ("notes",))
    (True, False)
    >>> touches_graph_namespace("list_namespaces", None)
    False
    """
    parts = tuple(namespace or ())
    if parts[: len(GRAPH_NAMESPACE)] == GRAPH_NAMESPACE:
        return True
    # an empty prefix searches every namespace, the graph's too (listing names shows only them)
    return action == "search" and not parts


async def store_rule(ctx: Auth.types.AuthContext, value: Any) -> None:
    """The graph's namespace refused to everyone; the rest refused to authenticated callers.

    The server's own graph writes to its store directly, not through the API.
    """
    namespace = value.get("namespace") if isinstance(value, dict) else None
    if touches_graph_namespace(str(ctx.action), namespace):
        raise forbidden(
            f"store.{ctx.action}: the namespace {GRAPH_NAMESPACE[0]!r} (the usage signal's "
            "history, the inbox's sessions) is written and read only by the graph itself; name "
            "another namespace"
        )
    if principal_of(ctx) is None:
        return
    raise forbidden(f"store.{ctx.action} is not allowed on this server")
