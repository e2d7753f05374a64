"""The operator inbox, served by the graph's own LangGraph server at ``/inbox``.

``langgraph.json`` names :data:`algenta_graph.inbox.app.app` as its ``http.app``; the pages are
rendered on the server from the package's templates, call the API as the signed-in operator
(:mod:`algenta_graph.inbox.queries`) and keep a signed session cookie
(:mod:`algenta_graph.inbox.session`). See ``docs/ARCHITECTURE.md``, "The operator inbox".
"""

from __future__ import annotations

__all__: list[str] = []
