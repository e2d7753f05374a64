"""The public entry points: create_governed_agent owning its connection, the async context
manager, the sync entry point for scripts, and the package's lazy exports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from graph_support import tool_json

from algenta_graph.engine import ReferenceEngine, WebhookReceiver

pytestmark = pytest.mark.timeout(120)


def test_public_api_names_resolve() -> None:
    import algenta_graph

    for name in algenta_graph.__all__:
        assert getattr(algenta_graph, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        algenta_graph.nope  # noqa: B018


def test_import_is_light() -> None:
    code = (
        "import sys, algenta_graph; "
        "heavy = [m for m in ('langgraph', 'langchain_core', 'mcp', 'algenta_graph.graph') "
        "if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


async def test_governed_agent_owns_and_closes_its_connection(
    engine: ReferenceEngine, tmp_path: Path
) -> None:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    from algenta_graph.graph.factory import _OWNED, aclose_governed_agent, governed_agent

    async with (
        AsyncSqliteSaver.from_conn_string(str(tmp_path / "cp.sqlite")) as saver,
        governed_agent(
            base_url=engine.url, checkpointer=saver, ledger=str(tmp_path / "cp.sqlite")
        ) as graph,
    ):
        assert graph in _OWNED
        out = await graph.ainvoke(
            {"messages": [("user", "What can this engine do? Show me its contract.")]},
            {"configurable": {"thread_id": "t"}},
        )
    assert graph not in _OWNED
    await aclose_governed_agent(graph)  # idempotent
    assert [m.name for m in out["messages"] if m.type == "tool"] == ["get_contract"]
    assert out["messages"][-1].type == "ai" and not out["messages"][-1].tool_calls


async def test_connection_and_base_url_are_exclusive(engine: ReferenceEngine) -> None:
    from algenta_graph.connection.engine import EngineConnection
    from algenta_graph.graph import create_governed_agent

    async with EngineConnection(engine.url) as conn:
        with pytest.raises(ValueError, match="not both"):
            await create_governed_agent(connection=conn, base_url=engine.url)


def test_sync_entry_point_runs_escalates_resumes_and_persists(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    from algenta_graph.sync import create_governed_agent_sync

    db = str(tmp_path / "sync.sqlite")
    with create_governed_agent_sync(
        base_url=engine.url, profile="execute", db=db, operator_key_is_agent_key=True
    ) as agent:
        logged = agent.invoke(
            {
                "messages": [
                    (
                        "user",
                        "log_decision chosen_action=ship expected_value=10 confidence=0.3 "
                        "risk_p5=0.1 risk_p95=0.5",
                    )
                ]
            },
            "t",
        )
        decision = next(tool_json(m)["decision_id"] for m in logged["messages"] if m.type == "tool")
        agent.invoke(
            {"messages": [("user", f"execute decision_id={decision} webhook_url={webhook.url}")]},
            "t",
        )
        state = agent.get_state("t")
        assert state.interrupts[0].value["gate"] == "confidence"
        out = agent.resume({"action": "override", "operator": "ana", "reason": "ok'd"}, "t")
        assert out["receipts"][-1]["safety_overridden"] is True
    with create_governed_agent_sync(
        base_url=engine.url, profile="execute", db=db, operator_key_is_agent_key=True
    ) as again:
        values = again.get_state("t").values
    assert [r["decision_id"] for r in values["receipts"]] == [decision]
    assert values["operator_decisions"][0]["operator"] == "ana"
    assert len(webhook.received) == 1
