"""The served graph's factory in-process (``algenta_graph.serving.server``) against a real
reference engine: it compiles without a checkpointer and caches the graph and its connection.
Served by a real ``langgraph dev``: ``tests/served/test_server.py``.
"""

from __future__ import annotations

import pytest

from algenta_graph.engine import ReferenceEngine
from algenta_graph.serving.server import aclose_cached, make_graph


async def test_factory_compiles_without_checkpointer_and_caches(
    engine: ReferenceEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ALGENTA_BASE_URL", engine.url)
    monkeypatch.setenv("ALGENTA_PROFILE", "govern")
    try:
        first = await make_graph()
        again = await make_graph()
        assert first is again
        assert first.checkpointer is None
        listed = [c["name"] for c in engine.call_log()]
        monkeypatch.setenv("ALGENTA_TOP_K", "2")
        other = await make_graph()
        assert other is not first
        # the same engine setting reuses the open connection: no new catalog listing happened
        assert [c["name"] for c in engine.call_log()] == listed
    finally:
        await aclose_cached()
