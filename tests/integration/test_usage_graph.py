"""The usage signal inside the governed graph: only successful calls of the run's profile are
learned, and retrieval goes through it (``algenta_graph.retrieval.usage``).

A real reference engine over HTTP and a LangGraph ``InMemoryStore``: a successful
``get_contract`` is recorded under the run's profile; a denied ``execute_decision`` and a tool
outside the run's narrower profile are not; the next turn's retrieval is reranked by the store.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from graph_support import agent, call, config, execute, log_decision, open_connection
from langgraph.store.memory import InMemoryStore

from algenta_graph.engine import ReferenceEngine, WebhookReceiver
from algenta_graph.retrieval.usage import DEFAULT_NAMESPACE, UsageSignal

pytestmark = pytest.mark.timeout(120)


async def test_the_graph_learns_successful_calls_of_the_runs_profile_only(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    store = InMemoryStore()
    usage = UsageSignal(store)
    async with open_connection(engine) as conn:
        low = await log_decision(conn, confidence=0.3)
        replies = [
            call("get_contract", {}, "c1"),
            "here it is",
            execute(low, webhook.url, "c2"),
            "denied",
            call("get_contract", {}, "c3"),
            "again",
        ]
        policies = {"confidence": "report"}
        async with agent(
            conn, tmp_path / "cp.sqlite", replies, on_denial=policies, usage=usage
        ) as (
            graph,
            _,
        ):
            await graph.ainvoke({"messages": [("user", "show me the contract")]}, config("t"))
            await graph.ainvoke({"messages": [("user", "execute it")]}, config("t"))
            narrowed = config("n", profile="govern")
            out = await graph.ainvoke({"messages": [("user", "show me the contract")]}, narrowed)
    learned = {item.key for item in store.search((*DEFAULT_NAMESPACE, "execute"))}
    assert learned == {"get_contract"}  # the denied execute_decision was not learned
    under_govern = {item.key for item in store.search((*DEFAULT_NAMESPACE, "govern"))}
    assert under_govern == {"get_contract"}  # learned under the run's own, narrower profile
    assert "get_contract" in out["selected_tools"]  # retrieval went through the signal
