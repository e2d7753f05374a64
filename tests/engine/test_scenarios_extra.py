"""The three scenarios of the public conformance runner that the real engine cannot exercise yet
made exercisable on the reference engine, over real HTTP:

- #9 an upstream that times out surfaces as a typed ``retryable: true`` error, distinct from
  every policy denial (a :class:`~algenta_graph.engine.SilentHost`: a port that never answers);
- #12 the replay manifest of an execution re-runs to a byte-identical result, on this engine and
  on another one;
- #3 "execution paused for approval" through the governed graph: the escalation is the pause,
  the operator's resume the continuation.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from engine_support import ROLES_KEYS, body
from graph_support import agent, call, config, execute, tool_messages
from http_api_support import RUNNER, approve, base_url, client, code, fresh_plan
from langgraph.types import Command

from algenta_graph.connection.engine import EngineConnection
from algenta_graph.engine import ReferenceEngine, SilentHost, WebhookReceiver
from algenta_graph.engine.policy import GATES

Session = Callable[..., Any]

POLICY_AND_PLAN_CODES = {
    *(f"execution_blocked_{g}" for g in GATES),
    "plan_not_approved",
    "plan_not_approvable",
    "invalid_nonce",
    "plan_hash_mismatch",
    "override_not_permitted",
    "role_not_permitted",
    "execute_not_enabled",
    "unauthorized",
}


@pytest.fixture
def api(start_engine: Callable[..., ReferenceEngine]) -> ReferenceEngine:
    return start_engine(relaxed=False, keys=ROLES_KEYS, api_key=RUNNER)


# -- #9: a timing-out upstream is a typed, retryable error --------------------------------------


async def test_scenario_9_a_timing_out_upstream_is_a_typed_retryable_error(
    api: ReferenceEngine, webhook: WebhookReceiver
) -> None:
    async with client(api) as c:
        plan = await fresh_plan(c, "upstream timeout")
        await approve(c, plan)
        path = f"/v1/decision-plans/{plan['plan_id']}/execute"
        with SilentHost() as silent:
            timed_out = await c.post(path, json={"webhook_url": silent.url, "timeout_seconds": 1})
        after_timeout = (await c.get(f"/v1/decision-plans/{plan['plan_id']}")).json()
        retried = await c.post(path, json={"webhook_url": webhook.url})
    error = timed_out.json()["error"]
    assert timed_out.status_code == 504
    assert error["code"] == "upstream_timeout" and error["retryable"] is True
    assert error["code"] not in POLICY_AND_PLAN_CODES and "gate" not in error
    assert "before the request was sent" in error["message"]
    # nothing was sent, so the approval is not spent: the caller may retry, and it delivers
    assert timed_out.json()["lifecycle_state"] == after_timeout["lifecycle_state"] == "approved"
    assert retried.status_code == 200 and retried.json()["receipt"]["execution_status"] == (
        "delivered"
    )
    assert [e["execution_status"] for e in api.executions()] == ["failed", "delivered"]
    assert len(webhook.received) == 1


async def test_scenario_9_over_mcp_the_receipt_names_the_timeout_and_marks_it_retryable(
    start_engine: Callable[..., ReferenceEngine], mcp_session: Session
) -> None:
    engine = start_engine()
    async with mcp_session(engine.url) as s:
        logged = await s.call_tool(
            "log_decision",
            {
                "chosen_action": "a",
                "expected_value": 1.0,
                "confidence": 0.9,
                "risk_p5": 0.1,
                "risk_p95": 0.2,
            },
        )
        decision_id = body(logged)["decision_id"]
        with SilentHost() as silent:
            result = await s.call_tool(
                "execute_decision",
                {"decision_id": decision_id, "webhook_url": silent.url, "timeout_seconds": 1},
            )
    receipt = body(result)
    assert not result.isError
    assert receipt["execution_status"] == "failed" and receipt["status"] == "failed"
    assert receipt["failure_code"] == "upstream_timeout" and receipt["retryable"] is True


async def test_an_upstream_that_received_the_request_and_never_answered_is_not_retryable(
    api: ReferenceEngine, webhook: WebhookReceiver
) -> None:
    """The contrast: once the request may have reached the webhook, a retry could act twice, so
    the error is typed too but ``retryable: false`` and the approval is spent (DESIGN inv. 8)."""
    async with client(api) as c:
        plan = await fresh_plan(c, "no answer")
        await approve(c, plan)
        answer = await c.post(
            f"/v1/decision-plans/{plan['plan_id']}/execute",
            json={"webhook_url": webhook.url_for_delay(3), "timeout_seconds": 1},
        )
    assert answer.status_code == 504
    assert answer.json()["error"]["code"] == "upstream_outcome_unknown"
    assert answer.json()["error"]["retryable"] is False
    assert answer.json()["lifecycle_state"] == "executed"
    assert [e["execution_status"] for e in api.executions()] == ["unknown"]


# -- #12: a replay manifest per execution re-runs byte-identically -----------------------------


async def test_scenario_12_the_replay_manifest_re_runs_to_a_byte_identical_result(
    api: ReferenceEngine, start_engine: Callable[..., ReferenceEngine]
) -> None:
    async with client(api) as c:
        plan = await fresh_plan(c, "replay")
        await approve(c, plan)
        executed = (await c.post(f"/v1/decision-plans/{plan['plan_id']}/execute")).json()
        execution_id = executed["execution_id"]
        shown = await c.get(f"/v1/executions/{execution_id}")
        manifest = (await c.get(f"/v1/executions/{execution_id}/replay-manifest")).json()
        first = await c.post("/v1/replays", json=manifest)
        second = await c.post("/v1/replays", json=manifest)
        tampered_inputs = {**manifest["inputs"], "seed": manifest["inputs"]["seed"] + 1}
        tampered = await c.post("/v1/replays", json={**manifest, "inputs": tampered_inputs})
    # another engine, another database: the manifest alone re-runs it
    other = start_engine(relaxed=False, api_key=RUNNER)
    async with client(other) as c:
        elsewhere = await c.post("/v1/replays", json=manifest)
    assert shown.json()["replay_manifest_at"].endswith("/replay-manifest")
    assert manifest["execution_id"] == execution_id and manifest["plan_id"] == plan["plan_id"]
    assert manifest["inputs"]["pack_id"] == "renewal_capacity_allocation"
    assert manifest["result_sha256"] == plan["plan_hash"].removeprefix("sha256:")
    for replay in (first, second, elsewhere):
        assert replay.status_code == 200
        assert replay.content == first.content
        assert hashlib.sha256(replay.content).hexdigest() == manifest["result_sha256"]
        assert replay.headers["x-content-sha256"] == manifest["result_sha256"]
        assert replay.headers["x-replay-matches"] == "true"
        assert replay.headers["x-replay-of"] == execution_id
    assert json.loads(first.content) == plan["plan"]  # the plan that was executed
    assert tampered.status_code == 200 and tampered.headers["x-replay-matches"] == "false"
    assert tampered.content != first.content


async def test_the_replay_of_an_mcp_planned_execution(
    api: ReferenceEngine, webhook: WebhookReceiver, mcp_session: Session
) -> None:
    from engine_support import AGENT, log_planned, plan

    async with mcp_session(api.url, api_key=AGENT) as s:
        p = await plan(s)
        decision_id = await log_planned(s, p)
    async with client(api) as c:
        await approve(c, p)
    async with mcp_session(api.url, api_key=AGENT) as s:
        result = await s.call_tool(
            "execute_decision",
            {
                "decision_id": decision_id,
                "webhook_url": webhook.url,
                "idempotency_key": "replay-mcp",
                "nonce": p["nonce"],
            },
        )
    execution_id = body(result)["execution_id"]
    async with client(api) as c:
        manifest = (await c.get(f"/v1/executions/{execution_id}/replay-manifest")).json()
        replay = await c.post("/v1/replays", json=manifest)
    assert manifest["inputs"] == {
        "kind": "scenario",
        "scenario": "restock_inventory",
        "seed": 42,
        "n_samples": 10000,
        "chosen_action": "restock_fast_movers",
    }
    assert replay.headers["x-replay-matches"] == "true"
    assert "sha256:" + hashlib.sha256(replay.content).hexdigest() == p["plan_hash"]


async def test_an_execution_without_a_plan_has_no_replay(
    start_engine: Callable[..., ReferenceEngine], webhook: WebhookReceiver, mcp_session: Session
) -> None:
    engine = start_engine()
    async with mcp_session(engine.url) as s:
        logged = await s.call_tool(
            "log_decision",
            {
                "chosen_action": "a",
                "expected_value": 1.0,
                "confidence": 0.9,
                "risk_p5": 0.1,
                "risk_p95": 0.2,
            },
        )
        decision_id = body(logged)["decision_id"]
        await s.call_tool(
            "execute_decision", {"decision_id": decision_id, "webhook_url": webhook.url}
        )
    [execution] = engine.executions()
    async with httpx.AsyncClient(base_url=base_url(engine), timeout=30) as c:
        answer = await c.get(f"/v1/executions/{execution['execution_id']}/replay-manifest")
    assert answer.status_code == 409 and code(answer) == "not_replayable"


# -- #3: execution paused for approval, through the governed graph ------------------------------


async def test_scenario_3_execution_paused_for_approval_is_the_graphs_escalation(
    api: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    """An execute attempt that hits an approval gate pauses (the graph's escalation: an
    ``interrupt()`` carrying the approval request, checkpointed) and is resumed with a
    continuation (the operator's ``Command(resume=...)`` on the same thread). Nothing runs
    while it waits; the continuation executes once and records who approved.

    The graph holds one key with both roles (as ``--api-key`` has), given to its operator path
    as the operator credential too (``operator_api_key``): the engine accepts the override only
    from a key with the operator role."""
    fields = ("chosen_action", "expected_value", "confidence", "risk_p5", "risk_p95")
    override = {"action": "override", "operator": "ana", "reason": "pricing committee approved"}

    def answer(out: dict[str, Any]) -> dict[str, Any]:
        return dict(json.loads(tool_messages(out)[-1].text))

    async with (
        EngineConnection(
            api.url, profile="execute", api_key=RUNNER, operator_api_key=RUNNER
        ) as conn,
        agent(conn, tmp_path / "cp.sqlite", []) as (graph, model),
    ):
        cfg = config("paused")

        async def turn(text: str, *replies: Any) -> dict[str, Any]:
            model.replies.extend(replies)
            return dict(await graph.ainvoke({"messages": [("user", text)]}, cfg))

        scenario = {"scenario": "price_increase"}  # a coin flip: the confidence gate
        planned = answer(await turn("plan", call("plan_decision", scenario, "p1"), "planned"))
        logged = {**{k: planned[k] for k in fields}, "plan_id": planned["plan_id"]}
        decision = answer(await turn("log", call("log_decision", logged, "l1"), "logged"))
        async with client(api) as c:
            assert (await approve(c, planned)).status_code == 200
        paused = await turn("execute", execute(decision["decision_id"], webhook.url, "e1"))
        state = await graph.aget_state(cfg)
        nothing_yet = (list(api.executions()), list(webhook.received))
        model.replies.append("executed after approval")
        resumed = await graph.ainvoke(Command(resume=override), cfg)
    [interrupt] = state.interrupts
    assert paused["denials"][-1]["gate"] == "confidence"
    assert interrupt.value["gate"] == "confidence"
    assert interrupt.value["decision_id"] == decision["decision_id"]
    assert state.next == ("denial_handler_confidence",)  # the paused step, checkpointed
    assert nothing_yet == ([], [])
    [receipt] = resumed["receipts"]
    assert receipt["source"] == "operator" and receipt["safety_overridden"] is True
    assert resumed["operator_decisions"][-1]["operator"] == "ana"
    assert [e["plan_id"] for e in api.executions()] == [planned["plan_id"]]
    assert len(webhook.received) == 1
