"""The Algenta HTTP API of the reference engine, over real HTTP on a free port with
real keys and a real SQLite file.

One test per exercisable scenario of the public conformance runner (thyn-ai/algenta-integrations,
``demo/conformance/scenarios.py``), written from the scenario's description (not from the
runner's code), with the runner's request shapes: ``X-API-Key``, the
``renewal_capacity_allocation`` case, an empty execute body. Then: the pack computed for real,
one engine over one store with the MCP tools, auth, and bad input on every route.
"""

from __future__ import annotations

import asyncio
import csv
import hashlib
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from engine_support import AGENT, OPERATOR, ROLES_KEYS, STAFF, body, engine_process
from http_api_support import (
    ACCOUNTS,
    PACK_INPUT,
    RUNNER,
    approve,
    base_url,
    case_body,
    client,
    code,
    counts,
    fresh_plan,
)

from algenta_graph._net import free_port
from algenta_graph.engine import ReferenceEngine, WebhookReceiver

Session = Callable[..., Any]

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


@pytest.fixture
def api(start_engine: Callable[..., ReferenceEngine]) -> ReferenceEngine:
    """A strict engine with the runner's key (``api_key``) and the role keys."""
    return start_engine(relaxed=False, keys=ROLES_KEYS, api_key=RUNNER)


async def plan_state(engine: ReferenceEngine, plan_id: str) -> str:
    async with client(engine, OPERATOR) as c:
        shown = await c.get(f"/v1/decision-plans/{plan_id}")
    assert shown.status_code == 200, shown.text
    return str(shown.json()["lifecycle_state"])


# -- the runner's exercisable scenarios, from their descriptions ------------------------------


async def test_scenario_1_read_only_recommendation(api: ReferenceEngine) -> None:
    """A decision case accepts input, an analysis run completes, and a plan is proposed
    carrying a plan_hash and a single-use nonce."""
    async with client(api) as c:
        case = await c.post("/v1/decision-cases", json=case_body("conformance s1"))
        run = await c.post(f"/v1/decision-cases/{case.json()['case_id']}/analysis-runs", json={})
        plan = await c.post(f"/v1/analysis-runs/{run.json()['run_id']}/action-plans")
        other = await c.post(f"/v1/analysis-runs/{run.json()['run_id']}/action-plans")
        shown = await c.get(f"/v1/decision-cases/{case.json()['case_id']}")
    assert case.status_code == 201 and case.json()["pack_id"] == "renewal_capacity_allocation"
    assert run.status_code == 201 and run.json()["status"] == "completed"
    assert plan.status_code == 201
    p = plan.json()
    assert p["lifecycle_state"] == "proposed" and len(p["plan_hash"]) >= 32 and p["nonce"]
    assert p["case_id"] == case.json()["case_id"] and p["run_id"] == run.json()["run_id"]
    # single use: every proposal has a nonce of its own (the same analysis, the same hash)
    assert other.json()["nonce"] != p["nonce"] and other.json()["plan_hash"] == p["plan_hash"]
    assert shown.json()["lifecycle_state"] == "proposed"
    assert [x["plan_id"] for x in shown.json()["plans"]] == [p["plan_id"], other.json()["plan_id"]]
    assert api.executions() == []  # read-only: nothing executed


async def test_scenario_2_execution_denied_by_policy(api: ReferenceEngine) -> None:
    """Executing an unapproved plan returns 409 with the NAMED code plan_not_approved."""
    async with client(api) as c:
        plan = await fresh_plan(c, "conformance s2")
        answer = await c.post(f"/v1/decision-plans/{plan['plan_id']}/execute")
    assert answer.status_code == 409 and code(answer) == "plan_not_approved"
    assert await plan_state(api, plan["plan_id"]) == "proposed"
    assert api.executions() == []


async def test_scenario_4_approval_granted_then_execute(api: ReferenceEngine) -> None:
    """Approving with the exact plan_hash and nonce moves the plan to approved; execute then
    succeeds and returns a receipt."""
    async with client(api) as c:
        plan = await fresh_plan(c, "conformance s4")
        approved = await approve(c, plan)
        state = await plan_state(api, plan["plan_id"])
        executed = await c.post(f"/v1/decision-plans/{plan['plan_id']}/execute")
    assert approved.status_code == 200 and approved.json()["status"] == "approved"
    assert state == "approved"
    assert executed.status_code == 200, executed.text
    assert executed.json()["lifecycle_state"] == "executed"
    receipt = executed.json()["receipt"]
    assert receipt["decision_id"] == plan["decision_id"] and receipt["plan_id"] == plan["plan_id"]
    assert [e["execution_id"] for e in api.executions()] == [receipt["execution_id"]]


async def test_scenario_5_approval_rejected(api: ReferenceEngine) -> None:
    """Approving with a wrong nonce is refused by name and does not advance the plan."""
    async with client(api) as c:
        plan = await fresh_plan(c, "conformance s5")
        refused = await approve(c, plan, nonce="b" * 16)
        case = await c.get(f"/v1/decision-cases/{plan['case_id']}")
        execute = await c.post(f"/v1/decision-plans/{plan['plan_id']}/execute")
    assert refused.status_code == 403 and code(refused) == "invalid_nonce"
    assert await plan_state(api, plan["plan_id"]) == "proposed"
    assert case.json()["lifecycle_state"] == "proposed"
    assert execute.status_code == 409 and code(execute) == "plan_not_approved"


async def test_scenario_6_duplicate_execution_prevented(
    api: ReferenceEngine, webhook: WebhookReceiver
) -> None:
    """Executing an already-executed plan is refused: a compare-and-set on 'approved', so of
    concurrent callers one wins and the others lose, rather than several succeeding."""
    async with client(api) as c:
        plan = await fresh_plan(c, "conformance s6")
        assert (await approve(c, plan)).status_code == 200
        path = f"/v1/decision-plans/{plan['plan_id']}/execute"
        answers = await asyncio.gather(
            *(c.post(path, json={"webhook_url": webhook.url}) for _ in range(6))
        )
        later = await c.post(path)
    assert sorted(a.status_code for a in answers) == [200] + [409] * 5
    assert {code(a) for a in answers if a.status_code == 409} == {"plan_not_approved"}
    assert later.status_code == 409 and code(later) == "plan_not_approved"
    assert len(api.executions()) == 1 and len(webhook.received) == 1


async def test_scenario_7_reused_challenge_rejected(api: ReferenceEngine) -> None:
    """The approval nonce is single-use: presenting it twice is refused (the lifecycle gate
    answers first: plan_not_approvable)."""
    async with client(api) as c:
        plan = await fresh_plan(c, "conformance s7")
        first = await approve(c, plan)
        again = await approve(c, plan)
    assert first.status_code == 200
    assert again.status_code == 409 and code(again) == "plan_not_approvable"


async def test_scenario_8_modified_plan_hash_rejected(api: ReferenceEngine) -> None:
    """Approving with a plan_hash that does not match the proposal is refused by name."""
    async with client(api) as c:
        plan = await fresh_plan(c, "conformance s8")
        zeros = await approve(c, plan, plan_hash="0" * 64)
        off_by_one = await approve(c, plan, plan_hash=plan["plan_hash"][:-1] + "0")
    assert zeros.status_code == off_by_one.status_code == 403
    assert code(zeros) == code(off_by_one) == "plan_hash_mismatch"
    assert await plan_state(api, plan["plan_id"]) == "proposed"


async def test_scenario_10_execution_receipt_versioned(api: ReferenceEngine) -> None:
    """The receipt carries receipt_version, a distinct execution_id, the bound plan_hash,
    approval_state, and the caller's trace_id and idempotency_key."""
    async with client(api) as c:
        plan = await fresh_plan(c, "conformance s10")
        await approve(c, plan)
        answer = await c.post(
            f"/v1/decision-plans/{plan['plan_id']}/execute",
            headers={"traceparent": TRACEPARENT, "Idempotency-Key": "conf-0123456789ab"},
        )
        replay = await c.post(
            f"/v1/decision-plans/{plan['plan_id']}/execute",
            headers={"Idempotency-Key": "conf-0123456789ab"},
        )
    assert answer.status_code == 200, answer.text
    r = answer.json()["receipt"]
    assert r["receipt_version"] == "2"
    assert r["execution_id"] and r["execution_id"] != plan["plan_id"]
    assert r["plan_hash"] == plan["plan_hash"] and r["approval_state"] == "approved"
    assert r["trace_id"] == TRACE_ID and r["idempotency_key"] == "conf-0123456789ab"
    assert r["status"] == "executed" and r["executed_by"] == "api-key"
    # the same Idempotency-Key again: the stored receipt, nothing executed twice
    assert replay.status_code == 200 and replay.json()["receipt"]["idempotent_replay"] is True
    assert replay.json()["receipt"]["execution_id"] == r["execution_id"]
    assert len(api.executions()) == 1


@pytest.mark.parametrize("fmt", ["json", "csv", "jsonl"])
async def test_scenario_11_audit_export_hash_verifies(api: ReferenceEngine, fmt: str) -> None:
    """GET /v1/audit-logs/export.{fmt} returns X-Content-SHA256 equal to sha256 of the
    delivered bytes, re-hashed by the client exactly as an auditor would."""
    async with client(api) as c:
        empty = await c.get(f"/v1/audit-logs/export.{fmt}")
        plan = await fresh_plan(c, "conformance s11")
        await approve(c, plan)
        await c.post(f"/v1/decision-plans/{plan['plan_id']}/execute")
        full = await c.get(f"/v1/audit-logs/export.{fmt}")
    for answer in (empty, full):
        assert answer.status_code == 200
        assert answer.headers["x-content-sha256"] == hashlib.sha256(answer.content).hexdigest()
    if fmt == "json":
        rows = full.json()
        assert empty.content == b"[]"
    elif fmt == "jsonl":
        rows = [json.loads(line) for line in full.text.splitlines()]
    else:
        rows = list(csv.DictReader(io.StringIO(full.text)))
    assert empty.headers["x-audit-export-rows"] == "0"
    assert full.headers["x-audit-export-rows"] == str(len(rows))
    assert [r["action"] for r in rows] == [
        "case.created",
        "analysis_run.completed",
        "plan.proposed",
        "decision.logged",
        "plan.approved",
        "execution.started",
        "execution.finished",
    ]
    assert {r["actor"] for r in rows} == {"api-key"}


# -- the pack is computed from its input ----------------------------------------------------


async def test_renewal_capacity_allocation_is_computed_from_the_input(api: ReferenceEngine) -> None:
    async with client(api) as c:

        async def analyse(pack_input: dict[str, Any]) -> dict[str, Any]:
            case = await c.post("/v1/decision-cases", json=case_body("calc", pack_input))
            assert case.status_code == 201, case.text
            run = await c.post(
                f"/v1/decision-cases/{case.json()['case_id']}/analysis-runs",
                json={"seed": 7, "n_samples": 2000},
            )
            assert run.status_code == 201, run.text
            return dict(run.json())

        base = await analyse(PACK_INPUT)
        again = await analyse(PACK_INPUT)
        healthier = [{**ACCOUNTS[0], "health_score": 95}, ACCOUNTS[1]]
        flipped = await analyse({**PACK_INPUT, "accounts": healthier})
        scoped = await analyse({**PACK_INPUT, "as_of": "2026-01-01", "horizon_days": 30})

    def hours(run: dict[str, Any], action: str = "allocate_by_risk") -> dict[str, float]:
        [chosen] = [a for a in run["result"]["actions"] if a["action"] == action]
        return {x["account_id"]: x["hours"] for x in chosen["allocation"]}

    by_risk = hours(base)
    assert base["result"]["recommended_action"] == "allocate_by_risk"
    assert sum(by_risk.values()) == 40 and by_risk["A5"] >= 4  # capacity, strategic minimum
    assert by_risk["A1"] > by_risk["A5"]  # A1 has far more ARR at risk (300k against 45k)
    assert hours(base, "allocate_evenly") == {"A1": 18.0, "A5": 22.0}
    assert base["result"]["arr_at_risk"] == 345000.0
    # seeded: the same input gives the same bytes; another input another allocation
    assert again["result_sha256"] == base["result_sha256"]
    assert hours(flipped)["A5"] > hours(flipped)["A1"]
    # with as_of, accounts renewing outside the horizon are out of scope
    assert scoped["result"]["accounts_out_of_scope"] == ["A1", "A5"]
    assert scoped["result"]["arr_at_risk"] == 0.0


async def test_a_scenario_case_plans_what_plan_decision_plans(
    api: ReferenceEngine, mcp_session: Session
) -> None:
    async with client(api) as c:
        case = await c.post(
            "/v1/decision-cases",
            json={"pack_id": "scenario", "pack_input": {"scenario": "restock_inventory"}},
        )
        short = await c.post("/v1/decision-cases", json={"pack_id": "price_increase"})
        run = await c.post(f"/v1/decision-cases/{case.json()['case_id']}/analysis-runs", json={})
        plan = await c.post(f"/v1/analysis-runs/{run.json()['run_id']}/action-plans")
    async with mcp_session(api.url, api_key=AGENT) as s:
        mcp_plan = body(await s.call_tool("plan_decision", {"scenario": "restock_inventory"}))
    assert case.status_code == short.status_code == 201
    assert short.json()["pack_input"] == {"scenario": "price_increase"}
    assert plan.json()["plan_hash"] == mcp_plan["plan_hash"]
    assert plan.json()["chosen_action"] == mcp_plan["chosen_action"] == "restock_fast_movers"


# -- one engine over one store with the MCP tools --------------------------------------------


async def test_a_plan_proposed_over_http_is_executed_over_mcp_and_then_refused_over_http(
    api: ReferenceEngine, webhook: WebhookReceiver, mcp_session: Session
) -> None:
    async with client(api) as c:
        plan = await fresh_plan(c, "http then mcp")
        await approve(c, plan)
    async with mcp_session(api.url, api_key=AGENT) as s:
        read = body(await s.call_tool("get_decision", {"decision_id": plan["decision_id"]}))
        rebind = await s.call_tool(
            "log_decision",
            {
                **{
                    k: plan[k]
                    for k in (
                        "chosen_action",
                        "expected_value",
                        "confidence",
                        "risk_p5",
                        "risk_p95",
                    )
                },
                "plan_id": plan["plan_id"],
            },
        )
        result = await s.call_tool(
            "execute_decision",
            {
                "decision_id": plan["decision_id"],
                "webhook_url": webhook.url,
                "idempotency_key": "graph-thread:call-1",
                "nonce": read["plan"]["nonce"],
            },
        )
        receipt = body(result)
    async with client(api) as c:
        again = await c.post(f"/v1/decision-plans/{plan['plan_id']}/execute")
        # a new plan for the same decision (it ran): approved, executed over HTTP -> the gate
        renewed = await c.post(
            f"/v1/analysis-runs/{plan['run_id']}/action-plans",
            json={"decision_id": plan["decision_id"]},
        )
        await approve(c, renewed.json())
        gate = await c.post(f"/v1/decision-plans/{renewed.json()['plan_id']}/execute")
    async with client(api, STAFF) as c:
        forced = await c.post(
            f"/v1/decision-plans/{renewed.json()['plan_id']}/execute",
            json={"force": True, "webhook_url": webhook.url},
        )
    assert read["decision"]["plan_id"] == plan["plan_id"] and read["plan"]["state"] == "approved"
    assert rebind.isError and body(rebind)["error"]["code"] == "plan_already_bound"
    assert not result.isError and receipt["plan_id"] == plan["plan_id"]
    assert receipt["execution_status"] == "delivered" and receipt["executed_by"] == "graph-worker"
    assert again.status_code == 409 and code(again) == "plan_not_approved"
    assert renewed.status_code == 201 and renewed.json()["decision_id"] == plan["decision_id"]
    assert gate.status_code == 409 and code(gate) == "execution_blocked_idempotency"
    assert gate.json()["error"]["gate"] == "idempotency"
    assert forced.status_code == 200, forced.text
    assert forced.json()["receipt"]["executed_by"] == "oncall-ops"
    assert [b["decision_id"] for b in webhook.received] == [plan["decision_id"]] * 2


async def test_a_decision_executed_over_http_is_refused_by_the_gate_over_mcp(
    api: ReferenceEngine, webhook: WebhookReceiver, mcp_session: Session
) -> None:
    async with client(api) as c:
        plan = await fresh_plan(c, "http first")
        await approve(c, plan)
        executed = await c.post(
            f"/v1/decision-plans/{plan['plan_id']}/execute", json={"webhook_url": webhook.url}
        )
    async with mcp_session(api.url, api_key=AGENT) as s:
        result = await s.call_tool(
            "execute_decision",
            {
                "decision_id": plan["decision_id"],
                "webhook_url": webhook.url,
                "idempotency_key": "graph-thread:call-2",
                "nonce": plan["nonce"],
            },
        )
    assert (
        executed.status_code == 200
        and executed.json()["receipt"]["execution_status"] == "delivered"
    )
    assert result.isError and body(result)["error"]["gate"] == "idempotency"
    assert len(webhook.received) == 1


async def test_an_override_over_http_needs_an_operator_key(
    api: ReferenceEngine, webhook: WebhookReceiver
) -> None:
    async with client(api) as c:
        plan = await fresh_plan(c, "override")
        await approve(c, plan)
        await c.post(f"/v1/decision-plans/{plan['plan_id']}/execute")
        renewed = (
            await c.post(
                f"/v1/analysis-runs/{plan['run_id']}/action-plans",
                json={"decision_id": plan["decision_id"]},
            )
        ).json()
        await approve(c, renewed)
    async with client(api, AGENT) as c:
        refused = await c.post(
            f"/v1/decision-plans/{renewed['plan_id']}/execute", json={"force": True}
        )
    assert refused.status_code == 403 and code(refused) == "override_not_permitted"
    assert await plan_state(api, renewed["plan_id"]) == "approved"
    assert len(api.executions()) == 1


@pytest.mark.parametrize("flag", ["force", "override_safety"])
async def test_an_agent_key_sending_either_override_flag_over_http_is_refused(
    api: ReferenceEngine, webhook: WebhookReceiver, flag: str
) -> None:
    async with client(api) as c:
        plan = await fresh_plan(c, f"agent {flag}")
        await approve(c, plan)
    async with client(api, AGENT) as c:
        refused = await c.post(
            f"/v1/decision-plans/{plan['plan_id']}/execute",
            json={flag: True, "webhook_url": webhook.url},
        )
    assert refused.status_code == 403 and code(refused) == "override_not_permitted"
    assert await plan_state(api, plan["plan_id"]) == "approved"  # nothing was executed
    assert api.executions() == [] and webhook.received == []


async def test_reading_a_plan_needs_an_operator_key(api: ReferenceEngine) -> None:
    async with client(api) as c:
        plan = await fresh_plan(c, "read")
    path = f"/v1/decision-plans/{plan['plan_id']}"
    answers = {}
    for label, token in [("no key", None), ("unknown key", "nope"), ("agent", AGENT)]:
        async with client(api, token) as c:
            answers[label] = await c.get(path)
    async with httpx.AsyncClient(base_url=base_url(api), timeout=30) as c:
        answers["no header at all"] = await c.get(path)
    got = {k: (v.status_code, code(v)) for k, v in answers.items()}
    assert got == {
        "no key": (401, "unauthorized"),
        "unknown key": (401, "unauthorized"),
        "agent": (403, "role_not_permitted"),
        "no header at all": (401, "unauthorized"),
    }
    assert all(plan["nonce"] not in v.text for v in answers.values())  # its secret kept
    async with client(api, OPERATOR) as c:
        shown = await c.get(path)
    assert shown.status_code == 200 and shown.json()["nonce"] == plan["nonce"]


# -- auth: X-API-Key and Bearer, the same keys and roles ---------------------------------------


async def test_x_api_key_and_bearer_are_the_same_keys_and_roles(api: ReferenceEngine) -> None:
    async with client(api, AGENT, scheme="bearer") as c:
        plan = await fresh_plan(c, "auth")
    answers = {}
    for label, token, scheme in [
        ("agent x-api-key", AGENT, "x-api-key"),
        ("agent bearer", AGENT, "bearer"),
        ("no key", None, "x-api-key"),
        ("unknown key", "nope", "x-api-key"),
    ]:
        async with client(api, token, scheme) as c:
            answers[label] = await approve(c, plan)
            answers[label + " export"] = await c.get("/v1/audit-logs/export.json")
    async with httpx.AsyncClient(base_url=base_url(api), timeout=30) as c:
        answers["two different keys"] = await c.get(
            "/v1/audit-logs/export.json",
            headers={"X-API-Key": OPERATOR, "Authorization": f"Bearer {AGENT}"},
        )
    async with client(api, OPERATOR, "x-api-key") as c:
        answers["operator x-api-key"] = await approve(c, plan)
    got = {k: (v.status_code, code(v)) for k, v in answers.items()}
    assert got == {
        "agent x-api-key": (403, "role_not_permitted"),
        "agent x-api-key export": (403, "role_not_permitted"),
        "agent bearer": (403, "role_not_permitted"),
        "agent bearer export": (403, "role_not_permitted"),
        "no key": (401, "unauthorized"),
        "no key export": (401, "unauthorized"),
        "unknown key": (401, "unauthorized"),
        "unknown key export": (401, "unauthorized"),
        "two different keys": (401, "unauthorized"),
        "operator x-api-key": (200, ""),
    }
    assert answers["operator x-api-key"].json()["approved_by"] == "alice"


async def test_mcp_accepts_x_api_key_too(api: ReferenceEngine) -> None:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with (
        httpx.AsyncClient(headers={"X-API-Key": AGENT}, timeout=30) as http,
        streamable_http_client(api.url, http_client=http) as (read, write, _),
        ClientSession(read, write) as s,
    ):
        await s.initialize()
        contract = body(await s.call_tool("get_contract", {}))
    async with httpx.AsyncClient(timeout=30) as http:
        refused = await http.post(api.url, json={}, headers={"X-API-Key": "nope"})
    assert contract["mode"] == "strict"
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"


# -- bad input on every route: a named 4xx, never a traceback, nothing written --------------


# (method, path, body: raw bytes, JSON or none, status, error code)
BAD_INPUT: list[tuple[str, str, bytes | dict[str, Any] | None, int, str]] = [
    ("POST", "/v1/decision-cases", b"{not json", 400, "invalid_json"),
    ("POST", "/v1/decision-cases", b"[1, 2]", 400, "invalid_request"),
    ("POST", "/v1/decision-cases", {"title": "no pack"}, 400, "invalid_request"),
    ("POST", "/v1/decision-cases", {**case_body("x"), "color": "red"}, 400, "invalid_request"),
    ("POST", "/v1/decision-cases", {"pack_id": "moon_base"}, 400, "unknown_pack"),
    (
        "POST",
        "/v1/decision-cases",
        {"pack_id": "renewal_capacity_allocation"},
        422,
        "invalid_pack_input",
    ),
    (
        "POST",
        "/v1/decision-cases",
        case_body("x", {**PACK_INPUT, "accounts": [{**ACCOUNTS[0], "arr": -1}]}),
        422,
        "invalid_pack_input",
    ),
    (
        "POST",
        "/v1/decision-cases",
        case_body("x", {**PACK_INPUT, "accounts": [ACCOUNTS[0], ACCOUNTS[0]]}),
        422,
        "invalid_pack_input",
    ),
    (
        "POST",
        "/v1/decision-cases",
        case_body("x", {**PACK_INPUT, "constraints": {"strategic_min_hours": 41}}),
        422,
        "invalid_pack_input",
    ),
    (
        "POST",
        "/v1/decision-cases",
        b'{"pack_id": "renewal_capacity_allocation", "pack_input": {"accounts": [{"account_id":'
        b' "A", "arr": NaN, "renewal_date": "2026-01-01", "health_score": 1}],'
        b' "capacity": {"total_hours": 1}}}',
        422,
        "invalid_pack_input",
    ),
    (
        "POST",
        "/v1/decision-cases",
        {"pack_id": "scenario", "pack_input": {"scenario": "moon"}},
        422,
        "invalid_pack_input",
    ),
    ("GET", "/v1/decision-cases/case_nope", None, 404, "case_not_found"),
    ("POST", "/v1/decision-cases/case_nope/analysis-runs", {}, 404, "case_not_found"),
    (
        "POST",
        "/v1/decision-cases/{case_id}/analysis-runs",
        {"n_samples": 5},
        400,
        "invalid_request",
    ),
    ("POST", "/v1/decision-cases/{case_id}/analysis-runs", {"seed": "x"}, 400, "invalid_request"),
    ("GET", "/v1/analysis-runs/run_nope", None, 404, "run_not_found"),
    ("POST", "/v1/analysis-runs/run_nope/action-plans", {}, 404, "run_not_found"),
    (
        "POST",
        "/v1/analysis-runs/{run_id}/action-plans",
        {"chosen_action": "fly"},
        400,
        "unknown_action",
    ),
    (
        "POST",
        "/v1/analysis-runs/{run_id}/action-plans",
        {"decision_id": "dec_nope"},
        404,
        "decision_not_found",
    ),
    ("POST", "/v1/analysis-runs/{run_id}/action-plans", {"plan": "mine"}, 400, "invalid_request"),
    (
        "POST",
        "/v1/decision-plans/plan_nope/approve",
        {"plan_hash": "h", "nonce": "n"},
        404,
        "plan_not_found",
    ),
    ("POST", "/v1/decision-plans/{plan_id}/approve", b"nope", 400, "invalid_request"),
    ("GET", "/v1/decision-plans/plan_nope", None, 404, "plan_not_found"),
    ("POST", "/v1/decision-plans/plan_nope/execute", None, 404, "plan_not_found"),
    (
        "POST",
        "/v1/decision-plans/{plan_id}/execute",
        {"timeout_seconds": 0},
        400,
        "invalid_request",
    ),
    ("POST", "/v1/decision-plans/{plan_id}/execute", {"force": "yes"}, 400, "invalid_request"),
    ("POST", "/v1/decision-plans/{plan_id}/execute", b"[]", 400, "invalid_request"),
    (
        "POST",
        "/v1/decision-plans/{plan_id}/execute",
        {"webhook_url": "ftp://x/y"},
        409,
        "plan_not_approved",
    ),
    ("GET", "/v1/executions/exe_nope", None, 404, "execution_not_found"),
    ("GET", "/v1/executions/exe_nope/replay-manifest", None, 404, "execution_not_found"),
    ("POST", "/v1/replays", {"inputs": {}}, 400, "invalid_request"),
    (
        "POST",
        "/v1/replays",
        {
            "manifest_version": "1",
            "inputs": {"kind": "pack", "pack_id": "moon"},
            "policy_snapshot_id": "p",
        },
        422,
        "invalid_manifest",
    ),
    ("GET", "/v1/audit-logs/export.xml", None, 404, "unknown_export_format"),
    ("GET", "/v1/no-such-route", None, 404, "not_found"),
    ("DELETE", "/v1/decision-cases", None, 405, "method_not_allowed"),
]


async def test_bad_input_on_every_route_is_a_named_4xx_and_writes_nothing(
    api: ReferenceEngine,
) -> None:
    async with client(api) as c:
        plan = await fresh_plan(c, "bad input")
        ids = {"case_id": plan["case_id"], "run_id": plan["run_id"], "plan_id": plan["plan_id"]}
        before = counts(api.db_path)
        got, texts = [], []
        for method, path, payload, _, _ in BAD_INPUT:
            kwargs: dict[str, Any] = {}
            if isinstance(payload, bytes):
                kwargs["content"] = payload
            elif payload is not None:
                kwargs["json"] = payload
            answer = await c.request(method, path.format(**ids), **kwargs)
            got.append((method, path, answer.status_code, code(answer)))
            texts.append(answer.text)
        after = counts(api.db_path)
    assert got == [(m, p, status, c) for m, p, _, status, c in BAD_INPUT]
    assert not [t for t in texts if "Traceback" in t or 'File "' in t]
    assert after == before  # nothing written by any of them
    assert await plan_state(api, plan["plan_id"]) == "proposed"


async def test_the_execute_refusals_of_a_bad_webhook_or_key_write_nothing(
    api: ReferenceEngine,
) -> None:
    async with client(api) as c:
        plan = await fresh_plan(c, "bad execute")
        await approve(c, plan)
        before = counts(api.db_path)
        path = f"/v1/decision-plans/{plan['plan_id']}/execute"
        answers = [
            await c.post(path, json={"webhook_url": "ftp://x/y"}),
            await c.post(path, json={"webhook_url": "http://evil.test/hook"}),
            await c.post(path, headers={"Idempotency-Key": "k" * 201}),
            await c.post(path, json={"metadata": {"blob": "x" * 20000}}),
        ]
        after = counts(api.db_path)
    assert [(a.status_code, code(a)) for a in answers] == [
        (400, "invalid_webhook_url"),
        (403, "webhook_host_not_allowed"),
        (400, "invalid_idempotency_key"),
        (422, "invalid_arguments"),
    ]
    assert after == before and await plan_state(api, plan["plan_id"]) == "approved"


# -- the CLI serves all of it ---------------------------------------------------------------


async def test_algenta_graph_engine_serves_the_http_api(tmp_path: Path) -> None:
    port = free_port()
    args = ("--db", str(tmp_path / "e.sqlite"), "--strict", "--api-key", RUNNER)
    with engine_process(port, tmp_path / "engine.log", *args):
        headers = {"X-API-Key": RUNNER}
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=60
        ) as c:
            plan = await fresh_plan(c, "cli")
            approved = await approve(c, plan)
            executed = await c.post(
                f"/v1/decision-plans/{plan['plan_id']}/execute",
                headers={"traceparent": TRACEPARENT, "Idempotency-Key": "cli-1"},
            )
            export = await c.get("/v1/audit-logs/export.json")
    assert approved.status_code == 200 and executed.status_code == 200
    assert executed.json()["receipt"]["trace_id"] == TRACE_ID
    assert export.headers["x-content-sha256"] == hashlib.sha256(export.content).hexdigest()
    log = (tmp_path / "engine.log").read_text()
    assert f"execute {plan['plan_id']} by api-key -> recorded" in log
    assert "Traceback" not in log
