"""The reference engine's tools over real MCP (streamable HTTP on a free port, SQLite in tmp_path):
every governed tool, the advertised registry, bad input, the call log."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
import mcp.types as mt
import pytest
from mcp import ClientSession

from algenta_graph.engine import ReferenceEngine
from algenta_graph.engine.concurrency import KeyedLocks
from algenta_graph.engine.contract import IMPLEMENTED_TOOLS
from algenta_graph.engine.datasets import DATASETS
from algenta_graph.engine.delivery import check_webhook_url
from algenta_graph.engine.errors import EngineToolError
from algenta_graph.engine.policy import Policy, check
from algenta_graph.engine.registry import registry_names, registry_tools

Session = Callable[..., Any]


def text(result: Any) -> str:
    """The text of a tool result's first content block."""
    block = result.content[0]
    assert isinstance(block, mt.TextContent), block
    return block.text


def body(result: Any) -> Any:
    """The JSON object a tool answered with (text content)."""
    return json.loads(text(result))


async def call(session: ClientSession, name: str, args: dict[str, Any]) -> Any:
    result = await session.call_tool(name, args)
    assert not result.isError, text(result)
    return body(result)


async def call_error(session: ClientSession, name: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await session.call_tool(name, args)
    assert result.isError, text(result)
    return dict(body(result)["error"])


# -- discovery and data ------------------------------------------------------------------------


async def test_get_contract_reports_version_capabilities_and_policy(
    start_engine: Callable[..., ReferenceEngine], mcp_session: Session
) -> None:
    engine = start_engine(min_confidence=0.7, risk_floor=0.25, denials="json-body")
    async with mcp_session(engine.url) as s:
        contract = await call(s, "get_contract", {})
    assert contract["engine_version"] == "0.1.0"
    assert contract["policy"]["min_confidence"] == 0.7
    assert contract["policy"]["risk_floor"] == 0.25
    assert contract["policy"]["policy_snapshot_id"] == engine.policy.snapshot_id
    assert contract["gates"] == ["idempotency", "confidence", "risk_floor"]
    assert contract["denial_wire_form"] == "json-body"
    assert contract["capabilities"]["implemented_tools"] == list(IMPLEMENTED_TOOLS)
    assert contract["capabilities"]["registry_tool_count"] == 140
    assert {d["dataset"] for d in contract["datasets"]} == set(DATASETS)


async def test_query_data_filters_sorts_and_limits_real_rows(
    engine: ReferenceEngine, mcp_session: Session
) -> None:
    expected = [r for r in DATASETS["orders"] if r["status"] == "shipped" and r["quantity"] >= 50]
    assert expected, "the sample data must have rows for this filter"
    async with mcp_session(engine.url) as s:
        out = await call(
            s,
            "query_data",
            {
                "dataset": "orders",
                "filters": {"status": "shipped", "quantity": {"gte": 50}},
                "columns": ["order_id", "quantity"],
                "order_by": "quantity",
                "descending": True,
                "limit": 3,
            },
        )
    assert out["total_matching"] == len(expected)
    assert out["columns"] == ["order_id", "quantity"]
    assert len(out["rows"]) == min(3, len(expected))
    quantities = [r["quantity"] for r in out["rows"]]
    assert quantities == sorted(quantities, reverse=True)
    assert quantities[0] == max(r["quantity"] for r in expected)


async def test_query_data_names_unknown_datasets_columns_and_operators(
    engine: ReferenceEngine, mcp_session: Session
) -> None:
    async with mcp_session(engine.url) as s:
        err = await call_error(s, "query_data", {"dataset": "invoices"})
        assert err["code"] == "unknown_dataset"
        assert "orders" in err["message"] and "inventory" in err["message"]
        err = await call_error(s, "query_data", {"dataset": "orders", "filters": {"colour": 1}})
        assert err["code"] == "unknown_column" and "colour" in err["message"]
        err = await call_error(
            s, "query_data", {"dataset": "orders", "filters": {"quantity": {"approx": 3}}}
        )
        assert err["code"] == "invalid_filter" and "approx" in err["message"]


# -- simulation, recommendation, plans ---------------------------------------------------------


async def test_simulate_is_seeded_and_reports_the_decision_envelope(
    engine: ReferenceEngine, mcp_session: Session
) -> None:
    async with mcp_session(engine.url) as s:
        a = await call(s, "simulate", {"scenario": "restock_inventory", "seed": 7})
        b = await call(s, "simulate", {"scenario": "restock_inventory", "seed": 7})
        c = await call(s, "simulate", {"scenario": "restock_inventory", "seed": 8})
        custom = await call(
            s,
            "simulate",
            {
                "scenario": {"name": "solo", "actions": {"go": {"mean": 10, "stdev": 1}}},
                "n_samples": 500,
            },
        )
    assert a == b
    assert a["expected_value"] != c["expected_value"]
    assert a["recommended_action"] == "restock_fast_movers"
    assert 0.0 <= a["confidence"] <= 1.0
    assert a["risk_p5"] <= a["risk_p95"]
    assert a["policy_check"] == {"confidence": "pass", "risk_floor": "pass"}
    assert custom["scenario"] == "solo" and custom["confidence"] == 1.0


async def test_builtin_scenarios_trip_each_safety_gate(
    engine: ReferenceEngine, mcp_session: Session
) -> None:
    async with mcp_session(engine.url) as s:
        pricing = await call(s, "recommend", {"scenario": "price_increase"})
        expansion = await call(s, "recommend", {"scenario": "expand_region"})
    assert pricing["policy_check"]["confidence"] == "would_block"
    assert expansion["policy_check"] == {"confidence": "pass", "risk_floor": "would_block"}


async def test_recommend_agrees_with_simulate(
    engine: ReferenceEngine, mcp_session: Session
) -> None:
    async with mcp_session(engine.url) as s:
        rec = await call(s, "recommend", {"scenario": "restock_inventory"})
        sim = await call(s, "simulate", {"scenario": "restock_inventory"})
    assert rec["recommended_action"] == sim["recommended_action"]
    assert rec["recommended_action"] in rec["rationale"]


async def test_invalid_scenarios_are_named(engine: ReferenceEngine, mcp_session: Session) -> None:
    async with mcp_session(engine.url) as s:
        err = await call_error(s, "simulate", {"scenario": "moon_base"})
        assert err["code"] == "unknown_scenario" and "restock_inventory" in err["message"]
        err = await call_error(s, "simulate", {"scenario": {"actions": {"x": {"stdev": 1}}}})
        assert err["code"] == "invalid_scenario" and "mean" in err["message"]


async def test_plan_hash_binds_the_logged_decision(
    engine: ReferenceEngine, mcp_session: Session
) -> None:
    async with mcp_session(engine.url) as s:
        plan = await call(s, "plan_decision", {"scenario": "restock_inventory"})
        again = await call(s, "plan_decision", {"scenario": "restock_inventory"})
        other = await call(
            s, "plan_decision", {"scenario": "restock_inventory", "chosen_action": "do_nothing"}
        )
        numbers = {k: plan[k] for k in ("expected_value", "confidence", "risk_p5", "risk_p95")}
        # two plans have this hash, so the decision names its plan by plan_id
        logged = await call(
            s,
            "log_decision",
            {
                "chosen_action": plan["chosen_action"],
                "plan_hash": plan["plan_hash"],
                "plan_id": plan["plan_id"],
                **numbers,
            },
        )
        mismatch = await call_error(
            s,
            "log_decision",
            {"chosen_action": "do_nothing", "plan_hash": plan["plan_hash"], **numbers},
        )
        missing = await call_error(
            s, "log_decision", {"chosen_action": "x", "plan_hash": "sha256:0", **numbers}
        )
        unknown_action = await call_error(
            s, "plan_decision", {"scenario": "restock_inventory", "chosen_action": "fly"}
        )
    assert plan["plan_hash"].startswith("sha256:") and plan["plan_hash"] == again["plan_hash"]
    assert other["plan_hash"] != plan["plan_hash"]
    assert logged["decision"]["plan_hash"] == plan["plan_hash"]
    assert logged["decision"]["plan_id"] == plan["plan_id"]
    assert logged["decision"]["scenario"] == "restock_inventory"
    assert mismatch["code"] == "plan_hash_mismatch" and "chosen_action" in mismatch["message"]
    assert missing["code"] == "plan_not_found"
    assert unknown_action["code"] == "unknown_action"


async def test_policy_and_its_snapshots_survive_policy_changes(
    tmp_path: Any, mcp_session: Session
) -> None:
    db = tmp_path / "policy.sqlite"
    with ReferenceEngine(db=db, relaxed=True) as first:
        old_id = first.policy.snapshot_id
    async with (
        ReferenceEngine(db=db, min_confidence=0.75, relaxed=True) as engine,
        mcp_session(engine.url) as s,
    ):
        policy = await call(s, "get_execution_policy", {})
        listed = await call(s, "list_execution_policy_snapshots", {})
    assert policy["min_confidence"] == 0.75 and policy["risk_floor"] == 0.5
    assert [g["gate"] for g in policy["gates"]] == ["idempotency", "confidence", "risk_floor"]
    assert listed["current"] == policy["policy_snapshot_id"] == engine.policy.snapshot_id
    assert [x["policy_snapshot_id"] for x in listed["snapshots"]] == [listed["current"], old_id]
    assert listed["snapshots"][1]["policy"] == {"min_confidence": 0.6, "risk_floor": 0.5}


# -- decision memory ---------------------------------------------------------------------------


async def test_log_get_and_list_decisions(engine: ReferenceEngine, mcp_session: Session) -> None:
    async with mcp_session(engine.url) as s:
        ids = []
        for i in range(3):
            out = await call(
                s,
                "log_decision",
                {
                    "chosen_action": f"action_{i}",
                    "expected_value": 100.0 * i,
                    "confidence": 0.9,
                    "risk_p5": -0.1,
                    "risk_p95": 0.3,
                    "rationale": f"because {i}",
                },
            )
            ids.append(out["decision_id"])
        got = await call(s, "get_decision", {"decision_id": ids[1]})
        page = await call(s, "list_decisions", {"limit": 2})
        rest = await call(s, "list_decisions", {"limit": 2, "offset": 2})
        missing = await call_error(s, "get_decision", {"decision_id": "dec_nope"})
    assert len(set(ids)) == 3
    assert got["decision"]["chosen_action"] == "action_1"
    assert got["decision"]["rationale"] == "because 1"
    assert got["executions"] == []
    assert [d["decision_id"] for d in page["decisions"]] == [ids[2], ids[1]]
    assert (
        page["total"] == 3 and rest["count"] == 1 and rest["decisions"][0]["decision_id"] == ids[0]
    )
    assert page["decisions"][0]["execution_count"] == 0
    assert missing["code"] == "decision_not_found" and "dec_nope" in missing["message"]


# -- bad input ---------------------------------------------------------------------------------


async def test_bad_arguments_are_named_and_the_engine_keeps_serving(
    engine: ReferenceEngine, mcp_session: Session
) -> None:
    good = {
        "chosen_action": "ship",
        "expected_value": 1.0,
        "confidence": 0.9,
        "risk_p5": 0.0,
        "risk_p95": 1.0,
    }
    async with mcp_session(engine.url) as s:
        kept = await call(s, "log_decision", good)
        missing = await call_error(
            s, "log_decision", {k: v for k, v in good.items() if k != "confidence"}
        )
        wrong_type = await call_error(s, "log_decision", {**good, "confidence": "high"})
        out_of_range = await call_error(s, "log_decision", {**good, "confidence": 1.5})
        inverted = await call_error(s, "log_decision", {**good, "risk_p5": 2.0})
        unknown = await call_error(s, "log_decision", {**good, "confidance": 0.9})
        strict_bool = await call_error(
            s,
            "execute_decision",
            {
                "decision_id": kept["decision_id"],
                "webhook_url": "http://127.0.0.1:9/",
                "force": "yes",
            },
        )
        oversized = await call_error(
            s,
            "execute_decision",
            {
                "decision_id": kept["decision_id"],
                "webhook_url": "http://127.0.0.1:9/",
                "metadata": {"blob": "x" * 100_000},
            },
        )
        still = await call(s, "get_decision", {"decision_id": kept["decision_id"]})
    assert missing["code"] == "invalid_arguments" and "confidence: missing" in missing["message"]
    assert "confidence" in wrong_type["message"] and "'high'" in wrong_type["message"]
    assert "confidence" in out_of_range["message"]
    assert "risk_p5" in inverted["message"]
    assert "confidance" in unknown["message"]
    assert "force" in strict_bool["message"]
    assert "metadata" in oversized["message"] and "16384" in oversized["message"]
    assert still["decision"]["chosen_action"] == "ship" and still["executions"] == []
    assert engine.executions() == []


async def test_an_oversized_request_is_refused_and_the_engine_keeps_serving(
    engine: ReferenceEngine, mcp_session: Session
) -> None:
    huge = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "log_decision", "arguments": {"rationale": "x" * 2_000_000}},
    }
    headers = {"Accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient(headers=headers, timeout=30) as http:
        response = await http.post(engine.url, json=huge)
    assert response.status_code == 413
    async with mcp_session(engine.url) as s:
        assert (await call(s, "list_decisions", {}))["total"] == 0
    assert engine.call_log()[-1]["name"] == "list_decisions"


# -- the registry ------------------------------------------------------------------------------


def test_the_table_covers_exactly_the_registry_names() -> None:
    names = {n for tools in registry_names().values() for n in tools}
    assert len(names) == 140
    table = registry_tools()
    assert set(table) | set(IMPLEMENTED_TOOLS) == names
    assert not set(table) & set(IMPLEMENTED_TOOLS)
    for name, tool in table.items():
        assert name in registry_names()[tool.category]


async def test_all_140_tools_are_advertised_with_description_and_schema(
    engine: ReferenceEngine, mcp_session: Session
) -> None:
    async with mcp_session(engine.url) as s:
        tools = (await s.list_tools()).tools
    names = [t.name for t in tools]
    assert len(names) == len(set(names)) == 140
    assert set(names) == {n for ts in registry_names().values() for n in ts}
    for tool in tools:
        assert tool.description and len(tool.description) >= 20, tool.name
        assert tool.inputSchema["type"] == "object", tool.name
    descriptions = [t.description for t in tools]
    assert len(set(descriptions)) == len(descriptions)
    execute = next(t for t in tools if t.name == "execute_decision")
    contract = next(t for t in tools if t.name == "get_contract")
    assert execute.annotations and execute.annotations.destructiveHint is True
    assert contract.annotations and contract.annotations.readOnlyHint is True
    assert {"decision_id", "webhook_url", "force", "override_safety", "metadata"} <= set(
        execute.inputSchema["properties"]
    )


async def test_registry_tools_answer_not_supported_after_checking_arguments(
    engine: ReferenceEngine, mcp_session: Session
) -> None:
    async with mcp_session(engine.url) as s:
        err = await call_error(s, "list_models", {})
        bad = await call_error(s, "get_job_status", {})
        wrong = await call_error(s, "rerank", {"query": "q", "documents": "not a list"})
        unknown = await call_error(s, "teleport", {})
    assert err["code"] == "not_supported_in_reference_engine"
    assert "list_models" in err["message"] and "get_contract" in err["message"]
    assert bad["code"] == "invalid_arguments" and "job_id" in bad["message"]
    assert wrong["code"] == "invalid_arguments" and "documents" in wrong["message"]
    assert unknown["code"] == "unknown_tool"


async def test_registry_errors_follow_the_denial_wire_form(
    start_engine: Callable[..., ReferenceEngine], mcp_session: Session
) -> None:
    engine = start_engine(denials="json-body")
    async with mcp_session(engine.url) as s:
        result = await s.call_tool("list_models", {})
    assert result.isError is False
    assert body(result)["error"]["code"] == "not_supported_in_reference_engine"


# -- the call log ------------------------------------------------------------------------------


async def test_call_log_keeps_every_call_with_arguments_as_received(
    engine: ReferenceEngine, mcp_session: Session
) -> None:
    weird = {"dataset": "orders", "filters": {"region": {"in": ["north", "east"]}}, "limit": 2}
    async with mcp_session(engine.url) as s:
        await s.call_tool("get_contract", {})
        await s.call_tool("query_data", weird)
        await s.call_tool("list_models", {"x": [1, {"y": None}]})
    log = engine.call_log()
    assert [c["name"] for c in log] == ["get_contract", "query_data", "list_models"]
    assert log[1]["arguments"] == weird
    assert log[2]["arguments"] == {"x": [1, {"y": None}]}


# -- units: policy and webhook hosts -----------------------------------------------------------


@pytest.mark.parametrize(
    ("confidence", "risk_p5", "delivered", "force", "override", "expected"),
    [
        (0.9, 0.0, False, False, False, None),
        (0.9, 0.0, True, False, False, "idempotency"),
        (0.9, 0.0, True, True, False, None),
        (0.1, -0.9, True, False, True, "idempotency"),
        (0.1, -0.9, True, True, False, "confidence"),
        (0.9, -0.9, False, False, False, "risk_floor"),
        (0.1, -0.9, False, False, True, None),
        (0.6, -0.5, False, False, False, None),  # at the thresholds: allowed
    ],
)
def test_gate_order_and_thresholds(
    confidence: float,
    risk_p5: float,
    delivered: bool,
    force: bool,
    override: bool,
    expected: str | None,
) -> None:
    verdict = check(
        Policy(),
        confidence=confidence,
        risk_p5=risk_p5,
        already_executed=delivered,
        force=force,
        override_safety=override,
    )
    assert (verdict.denial.gate if verdict.denial else None) == expected


async def test_keyed_locks_serialise_per_key_and_are_dropped_after_use() -> None:
    locks = KeyedLocks()
    order: list[str] = []

    async def worker(key: str, tag: str, pause: float) -> None:
        async with locks.hold(key):
            order.append(f"{tag}+")
            await asyncio.sleep(pause)
            order.append(f"{tag}-")

    await asyncio.gather(worker("a", "a1", 0.05), worker("a", "a2", 0), worker("b", "b1", 0))
    assert order.index("a1-") < order.index("a2+")  # same key: one at a time
    assert order.index("b1+") < order.index("a1-")  # another key does not wait
    assert len(locks) == 0


def test_policy_rejects_nonsense_and_hashes_stably() -> None:
    with pytest.raises(ValueError, match="min_confidence"):
        Policy(min_confidence=1.5)
    with pytest.raises(ValueError, match="risk_floor"):
        Policy(risk_floor=-1)
    assert Policy().snapshot_id == Policy(0.6, 0.5).snapshot_id != Policy(0.7, 0.5).snapshot_id


def test_webhook_hosts_loopback_and_allowed_only() -> None:
    assert check_webhook_url("http://localhost:1/x", allowed_hosts=())
    assert check_webhook_url("http://[::1]:1/x", allowed_hosts=())
    assert check_webhook_url("https://Hooks.Internal/x", allowed_hosts=("hooks.internal",))
    for url in ("https://hooks.example.test/x", "ftp://127.0.0.1/x", "not a url"):
        with pytest.raises(EngineToolError):
            check_webhook_url(url, allowed_hosts=())


def test_bad_engine_options_raise_value_error(tmp_path: Any) -> None:
    with pytest.raises(ValueError, match="denials"):
        ReferenceEngine(db=tmp_path / "x.sqlite", denials="carrier-pigeon")
    with pytest.raises(ValueError, match="min_confidence"):
        ReferenceEngine(db=tmp_path / "x.sqlite", min_confidence=2)
