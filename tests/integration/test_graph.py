"""The governed graph over a real reference engine (HTTP) with real SQLite checkpoint files:
every route of the conditional edge, the report/halt policies, the profile guard, the
search_tools gateway, the model-facing surface, and the drawing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from graph_support import (
    agent,
    call,
    config,
    execute,
    execute_calls,
    log_decision,
    nodes_run,
    open_connection,
    tool_messages,
)
from langchain_core.messages import AIMessage, ToolMessage
from repo_paths import REPO

from algenta_graph.engine import ReferenceEngine, WebhookReceiver
from algenta_graph.governance.gates import GATE_NAMES
from algenta_graph.graph import build_governed_graph

pytestmark = pytest.mark.timeout(120)


def test_the_drawing_matches_its_committed_snapshot_offline() -> None:
    # the graph's structure (nodes, labelled edges) as Studio draws it, with no engine: a change
    # of the wiring shows here; regenerate docs/graph.mmd (and docs/graph.png with
    # docs/render_graph.py) when it is meant
    from algenta_graph.testing import OfflineConnection

    drawn = build_governed_graph(OfflineConnection()).compile(name="governed_agent")
    snapshot = REPO / "docs" / "graph.mmd"
    assert drawn.get_graph().draw_mermaid() == snapshot.read_text(), (
        "the graph's drawing changed: if that is meant, write the new one to docs/graph.mmd"
    )


async def test_drawing_has_a_labelled_edge_per_outcome(engine: ReferenceEngine) -> None:
    async with open_connection(engine) as conn:
        mermaid = build_governed_graph(conn).compile().get_graph().draw_mermaid()
    for gate in GATE_NAMES:
        assert f"governed_tool -. &nbsp;{gate}&nbsp; .-> denial_handler_{gate};" in mermaid
    assert "governed_tool -. &nbsp;halt&nbsp; .-> __end__;" in mermaid
    # ok and failed share the edge to model; LangGraph draws one label per (source, target)
    assert "governed_tool -. &nbsp;failed&nbsp; .-> model;" in mermaid
    assert "model -. &nbsp;tool_calls&nbsp; .-> governed_tool;" in mermaid
    for gate in GATE_NAMES:
        assert f"denial_handler_{gate} -. &nbsp;resolved&nbsp; .-> model;" in mermaid
        assert f"denial_handler_{gate} -. &nbsp;halt&nbsp; .-> __end__;" in mermaid


async def test_state_lists_exist_in_a_thread_where_nothing_happened(
    engine: ReferenceEngine, tmp_path: Path
) -> None:
    async with (
        open_connection(engine, "observe") as conn,
        agent(conn, tmp_path / "cp.sqlite", ["hello"]) as (graph, _),
    ):
        out = await graph.ainvoke({"messages": [("user", "hi")]}, config("t"))
        snapshot = await graph.aget_state(config("t"))
    for values in (out, snapshot.values):
        assert values["receipts"] == [] and values["denials"] == []
        assert values["operator_decisions"] == []
    json.dumps({k: snapshot.values[k] for k in ("receipts", "denials", "operator_decisions")})


async def test_ok_route_records_the_receipt_and_tags_the_execution(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    async with open_connection(engine) as conn:
        decision = await log_decision(conn)
        replies = [execute(decision, webhook.url, "call_exec"), "delivered"]
        async with agent(conn, tmp_path / "cp.sqlite", replies) as (graph, _):
            order = await nodes_run(graph, {"messages": [("user", "execute it")]}, config("t-ok"))
            values = (await graph.aget_state(config("t-ok"))).values
    assert order == ["retrieve_tools", "model", "governed_tool", "model"]
    [receipt] = values["receipts"]
    assert receipt["decision_id"] == decision and receipt["execution_status"] == "delivered"
    assert receipt["source"] == "model" and receipt["tool_call_id"] == "call_exec"
    assert values["denials"] == []
    [message] = tool_messages(values)
    assert message.response_metadata["algenta_outcome"] == "ok"
    assert message.status == "success" and decision in str(message.content)
    [body] = webhook.received
    assert body["decision_id"] == decision
    [execution] = engine.executions(decision)
    assert execution["metadata"] == {
        "algenta_graph": {"thread_id": "t-ok", "tool_call_id": "call_exec"}
    }
    assert execution["force"] is False and execution["override_safety"] is False


async def test_model_supplied_graph_metadata_is_replaced(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    forged = {"algenta_graph": {"thread_id": "someone-else"}, "ticket": "OPS-1"}
    async with open_connection(engine) as conn:
        decision = await log_decision(conn)
        replies = [execute(decision, webhook.url, "c1", metadata=forged), "ok"]
        async with agent(conn, tmp_path / "cp.sqlite", replies) as (graph, _):
            await graph.ainvoke({"messages": [("user", "go")]}, config("t-meta"))
    [execution] = engine.executions(decision)
    assert execution["metadata"] == {
        "ticket": "OPS-1",
        "algenta_graph": {"thread_id": "t-meta", "tool_call_id": "c1"},
    }


async def test_failed_route_for_a_result_that_is_neither_receipt_nor_denial(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    replies = [execute("dec_does_not_exist", webhook.url, "c1"), "it failed"]
    async with (
        open_connection(engine) as conn,
        agent(conn, tmp_path / "cp.sqlite", replies) as (graph, _),
    ):
        order = await nodes_run(graph, {"messages": [("user", "go")]}, config("t-fail"))
        values = (await graph.aget_state(config("t-fail"))).values
    assert order == ["retrieve_tools", "model", "governed_tool", "model"]
    [message] = tool_messages(values)
    assert message.status == "error"
    assert message.response_metadata["algenta_outcome"] == "failed"
    assert values["receipts"] == [] and values["denials"] == []
    assert webhook.received == []


async def test_failed_delivery_is_a_receipt_routed_as_failed(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    async with open_connection(engine) as conn:
        decision = await log_decision(conn)
        replies = [execute(decision, webhook.url_for_status(500), "c1"), "the webhook failed"]
        async with agent(conn, tmp_path / "cp.sqlite", replies) as (graph, _):
            await graph.ainvoke({"messages": [("user", "go")]}, config("t-500"))
            values = (await graph.aget_state(config("t-500"))).values
    [receipt] = values["receipts"]
    assert receipt["execution_status"] == "failed" and receipt["response_code"] == 500
    [message] = tool_messages(values)
    assert message.response_metadata["algenta_outcome"] == "failed"


async def test_idempotency_report_policy_tells_the_model(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    db = tmp_path / "cp.sqlite"
    async with open_connection(engine) as conn:
        decision = await log_decision(conn)
        replies = [
            execute(decision, webhook.url, "first"),
            "done",
            execute(decision, webhook.url, "second"),
            "the idempotency gate blocked it",
        ]
        async with agent(conn, db, replies) as (graph, _):
            await graph.ainvoke({"messages": [("user", "go")]}, config("t-a"))
            # another thread (another session): the engine's own idempotency gate answers
            order = await nodes_run(graph, {"messages": [("user", "again")]}, config("t-b"))
            values = (await graph.aget_state(config("t-b"))).values
    assert order == [
        "retrieve_tools",
        "model",
        "governed_tool",
        "denial_handler_idempotency",
        "model",
    ]
    [denial] = values["denials"]
    assert denial["gate"] == "idempotency" and denial["source"] == "model"
    assert denial["decision_id"] == decision and denial["tool_call_id"] == "second"
    [message] = tool_messages(values)
    assert "idempotency gate" in str(message.content)
    assert "cannot override" in str(message.content)
    assert values["receipts"] == []
    assert isinstance(values["messages"][-1], AIMessage)
    assert len(webhook.received) == 1 and len(execute_calls(engine)) == 2


async def test_same_thread_repeat_is_stopped_by_the_threads_receipts(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    async with open_connection(engine) as conn:
        decision = await log_decision(conn)
        replies = [
            execute(decision, webhook.url, "first"),
            "done",
            execute(decision, webhook.url, "second"),
            "already done",
        ]
        async with agent(conn, tmp_path / "cp.sqlite", replies) as (graph, _):
            await graph.ainvoke({"messages": [("user", "go")]}, config("t"))
            values = await graph.ainvoke({"messages": [("user", "again")]}, config("t"))
    assert len(execute_calls(engine)) == 1  # the engine never saw the repeat
    assert [r["tool_call_id"] for r in values["receipts"]] == ["first"]
    [denial] = values["denials"]
    assert denial["gate"] == "idempotency" and denial["source"] == "thread_receipts"


async def test_halt_policy_ends_the_run_with_the_denial_in_state(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    async with open_connection(engine) as conn:
        decision = await log_decision(conn, confidence=0.3)
        # one reply only: a second model call would raise IndexError
        replies = [execute(decision, webhook.url, "c1")]
        async with agent(
            conn, tmp_path / "cp.sqlite", replies, on_denial={"confidence": "halt"}
        ) as (graph, _):
            order = await nodes_run(graph, {"messages": [("user", "go")]}, config("t"))
            snapshot = await graph.aget_state(config("t"))
    assert order == ["retrieve_tools", "model", "governed_tool", "denial_handler_confidence"]
    assert snapshot.next == ()
    assert isinstance(snapshot.values["messages"][-1], ToolMessage)
    [denial] = snapshot.values["denials"]
    assert denial["gate"] == "confidence"
    assert webhook.received == []


async def test_per_run_configurable_policy_may_only_tighten_the_build_time_one(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    """docs/ARCHITECTURE.md invariant 9: a run's on_denial may be stricter, never looser."""
    async with open_connection(engine) as conn:
        decision = await log_decision(conn, risk_p5=-0.9)
        replies = [execute(decision, webhook.url, "c1"), "risk floor blocked it"]
        async with agent(conn, tmp_path / "cp.sqlite", replies) as (graph, _):
            cfg = config("t", on_denial={"risk_floor": "halt"})
            order = await nodes_run(graph, {"messages": [("user", "go")]}, cfg)
            snapshot = await graph.aget_state(cfg)
            with pytest.raises(ValueError, match=r"'risk_floor'.*'report' is looser"):
                await graph.ainvoke(
                    {"messages": [("user", "x")]}, config("t1", on_denial={"risk_floor": "report"})
                )
            with pytest.raises(ValueError, match="unknown policy 'ignore'"):
                await graph.ainvoke(
                    {"messages": [("user", "x")]},
                    config("t2", on_denial={"risk_floor": "ignore"}),
                )
    assert order[-1:] == ["denial_handler_risk_floor"]  # halted: the model never ran again
    assert snapshot.next == () and snapshot.interrupts == ()
    assert snapshot.values["denials"][0]["gate"] == "risk_floor"
    assert snapshot.values["denials"][0]["policy"] == "halt"
    assert webhook.received == []


async def test_profile_guard_refuses_tools_outside_the_profile(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    replies = [execute("dec_x", webhook.url, "c1"), "refused"]
    async with (
        open_connection(engine, "observe") as conn,
        agent(conn, tmp_path / "cp.sqlite", replies) as (graph, model),
    ):
        values = await graph.ainvoke({"messages": [("user", "execute dec_x")]}, config("t"))
    [message] = tool_messages(values)
    assert message.status == "error" and "not in the active profile" in str(message.content)
    assert execute_calls(engine) == []
    shown = {t["function"]["name"] for calls in model.bound_tools for t in calls}
    assert shown <= {"get_contract", "query_data", "simulate", "recommend", "search_tools"}


async def test_per_run_profile_narrows_but_never_widens(
    engine: ReferenceEngine, tmp_path: Path
) -> None:
    args = {
        "chosen_action": "a",
        "expected_value": 1.0,
        "confidence": 0.9,
        "risk_p5": 0.0,
        "risk_p95": 1.0,
    }
    replies = [call("log_decision", args, "c1"), "refused"]
    async with (
        open_connection(engine, "execute") as conn,
        agent(conn, tmp_path / "cp.sqlite", replies) as (graph, model),
    ):
        values = await graph.ainvoke(
            {"messages": [("user", "log a decision")]}, config("t", profile="observe")
        )
    [message] = tool_messages(values)
    assert message.status == "error" and "'observe'" in str(message.content)
    assert not [c for c in engine.call_log() if c["name"] == "log_decision"]
    shown = {t["function"]["name"] for t in model.bound_tools[0]}
    assert "log_decision" not in shown and "execute_decision" not in shown


async def test_search_tools_hits_join_the_next_model_call(
    engine: ReferenceEngine, tmp_path: Path
) -> None:
    replies = [call("search_tools", {"query": "log a decision record to memory"}, "s1"), "found"]
    async with (
        open_connection(engine, "execute") as conn,
        agent(conn, tmp_path / "cp.sqlite", replies, top_k=1) as (graph, model),
    ):
        values = await graph.ainvoke(
            {"messages": [("user", "what is in the contract?")]}, config("t")
        )
    first = [t["function"]["name"] for t in model.bound_tools[0]]
    second = [t["function"]["name"] for t in model.bound_tools[1]]
    assert len(first) == 2 and first[-1] == "search_tools"  # top_k=1 plus the gateway
    assert "log_decision" not in first and "log_decision" in second
    assert "log_decision" in values["selected_tools"]
    [message] = tool_messages(values)
    assert "log_decision" in json.loads(str(message.content))["tools"][0]["name"]


async def test_force_and_override_safety_never_reach_the_model_or_the_engine(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    async with open_connection(engine, "execute") as conn:
        decision = await log_decision(conn, confidence=0.2)
        smuggled = execute(
            decision,
            webhook.url,
            "c1",
            force=True,
            override_safety=True,
            metadata={"force": True, "override_safety": True},
        )
        replies = [
            call("search_tools", {"query": "force override_safety execute decision"}, "s1"),
            smuggled,
            "blocked",
        ]
        async with agent(
            conn, tmp_path / "cp.sqlite", replies, on_denial={"confidence": "report"}
        ) as (graph, model):
            values = await graph.ainvoke(
                {"messages": [("user", "execute with force")]}, config("t")
            )
    for shown in model.bound_tools:
        text = json.dumps(shown)
        assert "override_safety" not in text and '"force"' not in text
    search_result = tool_messages(values)[0]
    assert "override_safety" not in str(search_result.content)
    [sent] = execute_calls(engine)
    assert "force" not in sent["arguments"] and "override_safety" not in sent["arguments"]
    assert values["denials"][0]["gate"] == "confidence"
    assert engine.executions(decision) == [] and webhook.received == []


async def test_bad_build_arguments_are_rejected(engine: ReferenceEngine) -> None:
    async with open_connection(engine) as conn:
        with pytest.raises(ValueError, match="unknown gate 'speed'"):
            build_governed_graph(conn, on_denial={"speed": "report"})
        with pytest.raises(ValueError, match="unknown gate 'unknown'; the gates are idem"):
            build_governed_graph(conn, on_denial={"unknown": "halt"})
        with pytest.raises(ValueError, match="unknown policy 'ignore'"):
            build_governed_graph(conn, on_denial="ignore")
        with pytest.raises(ValueError, match="top_k"):
            build_governed_graph(conn, top_k=0)


async def test_unknown_gate_takes_the_halt_way(tmp_path: Path) -> None:
    """An engine with a gate the graph does not know (a real MCP server over HTTP)."""
    from mcp.server.fastmcp import FastMCP
    from mcp.server.fastmcp.exceptions import ToolError

    from algenta_graph._serve import BackgroundServer
    from algenta_graph.connection.engine import EngineConnection

    server = FastMCP("future-engine", stateless_http=True)

    @server.tool()
    def get_contract() -> dict[str, str]:
        """Fetch the engine's contract."""
        return {"engine": "future"}

    @server.tool()
    def execute_decision(
        decision_id: str, webhook_url: str, metadata: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Dispatch a decision."""
        body = {
            "code": "execution_blocked_quorum",
            "gate": "quorum",
            "message": "two approvers required",
            "override_hint": "none",
        }
        raise ToolError(json.dumps({"error": body}))

    http = BackgroundServer(server.streamable_http_app(), name="future-engine")
    http.start()
    try:
        replies = [execute("dec_1", "http://127.0.0.1:9/hook", "c1")]  # no second reply
        async with (
            EngineConnection(f"http://127.0.0.1:{http.port}/mcp", profile="execute") as conn,
            agent(conn, tmp_path / "cp.sqlite", replies) as (graph, _),
        ):
            order = await nodes_run(graph, {"messages": [("user", "go")]}, config("t"))
            values = (await graph.aget_state(config("t"))).values
    finally:
        http.stop()
    assert order == ["retrieve_tools", "model", "governed_tool"]  # then END: halt
    [denial] = values["denials"]
    assert denial["gate"] == "quorum" and denial["code"] == "execution_blocked_quorum"
    [message] = tool_messages(values)
    assert message.response_metadata["algenta_outcome"] == "gate:quorum"
