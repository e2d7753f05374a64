"""Base tools (``always_include``) and the bounded set of tools bound on every step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from graph_support import agent, call, config, open_connection
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from algenta_graph.catalog_server import CatalogServer
from algenta_graph.connection.client import SEARCH_TOOL
from algenta_graph.connection.engine import EngineConnection
from algenta_graph.engine import ReferenceEngine
from algenta_graph.graph import build_governed_graph, create_governed_agent
from algenta_graph.retrieval.catalog import MAX_FOUND_TOOLS
from algenta_graph.testing import ScriptedChatModel

pytestmark = pytest.mark.timeout(120)


def bound(model: ScriptedChatModel, n: int) -> list[str]:
    return [t["function"]["name"] for t in model.bound_tools[n]]


async def test_always_include_is_bound_every_turn_and_not_counted_in_top_k(
    engine: ReferenceEngine, tmp_path: Path
) -> None:
    replies = ["first answer", "second answer"]
    async with (
        open_connection(engine) as conn,
        agent(conn, tmp_path / "cp.sqlite", replies, top_k=2, always_include=["get_contract"]) as (
            graph,
            model,
        ),
    ):
        # a query that ranks get_contract first: it is still bound once, and 2 others fill top_k
        first = await graph.ainvoke(
            {"messages": [("user", "get the contract, query data, simulate and recommend")]},
            config("t"),
        )
        # a query retrieval does not rank it for
        await graph.ainvoke(
            {"messages": [("user", "log a new decision, plan it and simulate it")]}, config("t")
        )
    for n in (0, 1):
        names = bound(model, n)
        assert "get_contract" in names and SEARCH_TOOL in names
        assert len(names) == len(set(names)) == 1 + 2 + 1  # base + top_k + gateway
    assert "get_contract" not in first["selected_tools"] and len(first["selected_tools"]) == 2


async def test_always_include_names_must_exist_and_the_run_profile_still_applies(
    engine: ReferenceEngine, tmp_path: Path
) -> None:
    async with open_connection(engine) as conn:
        with pytest.raises(ValueError, match="no tool 'no_such_tool'"):
            build_governed_graph(conn, always_include=["no_such_tool"])
        with pytest.raises(TypeError, match="list of tool names"):
            build_governed_graph(conn, always_include="execute_decision")
        async with agent(
            conn, tmp_path / "cp.sqlite", ["ok"], always_include=["execute_decision"]
        ) as (graph, model):
            # a run narrowed to the observe profile never sees execute_decision
            await graph.ainvoke({"messages": [("user", "hi")]}, config("t", profile="observe"))
    assert "execute_decision" not in bound(model, 0)


def _searches(count: int) -> list[Any]:
    queries = ["crm contacts", "billing invoices", "inventory stock", "hr payroll"]
    replies: list[Any] = [
        call(SEARCH_TOOL, {"query": queries[i % len(queries)] + f" {i}", "k": 20}, f"s{i}")
        for i in range(count)
    ]
    return [*replies, "done"]


async def test_the_bound_set_stays_bounded_over_a_long_thread(
    engine: ReferenceEngine, tmp_path: Path
) -> None:
    """Every search_tools call adds up to 20 tools; at most MAX_FOUND_TOOLS of them (the most
    recent) are bound, whatever the number of searches and turns."""
    turns, searches = 3, 5
    model = ScriptedChatModel(replies=_searches(searches) * turns)
    with CatalogServer(size=2000) as catalog:
        extra = {"catalog": {"transport": "streamable_http", "url": catalog.url}}
        async with (
            EngineConnection(engine.url, profile="execute", extra_servers=extra) as conn,
            AsyncSqliteSaver.from_conn_string(str(tmp_path / "cp.sqlite")) as saver,
        ):
            graph = await create_governed_agent(
                model,
                connection=conn,
                checkpointer=saver,
                single_process=True,
                top_k=3,
                always_include=["get_contract"],
            )
            for turn in range(turns):
                out = await graph.ainvoke(
                    {"messages": [("user", f"turn {turn}: find tools")]}, config("long")
                )
                assert out["messages"][-1].content == "done"
    limit = 1 + 3 + MAX_FOUND_TOOLS + 1  # base + top_k + found + gateway
    sizes = [len(shown) for shown in model.bound_tools]
    assert len(sizes) == turns * (searches + 1)
    assert max(sizes) <= limit
    assert max(sizes) == limit  # the cap is reached, so it is what bounds the set
    # what the last search of a turn found is all bound on the next step
    found_total = len(set(out["selected_tools"]))
    assert found_total > limit  # the thread found more than it may bind
    assert all("get_contract" in [t["function"]["name"] for t in s] for s in model.bound_tools)
