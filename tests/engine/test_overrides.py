"""The override flags need an operator at the engine (invariant 14 of docs/ARCHITECTURE.md), over
real MCP and real HTTP with real keys.

``execute_decision`` with ``force`` or ``override_safety`` true is accepted only from a key with
the operator role and execute enabled, in strict mode, and in relaxed mode whenever the engine
has keys; otherwise ``override_not_permitted`` (or ``execute_not_enabled``) in the denials wire
form, nothing sent and no execution recorded. The model-facing agent key alone cannot override.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from engine_support import (
    AGENT,
    BOTH,
    OPERATOR,
    ROLES_KEYS,
    STAFF,
    approve,
    body,
    call,
    log_planned,
    plan,
)
from mcp import ClientSession

from algenta_graph.engine import ReferenceEngine, WebhookReceiver

Session = Callable[..., Any]

OVERRIDES = [{"force": True}, {"override_safety": True}, {"force": True, "override_safety": True}]


async def refused(s: ClientSession, args: dict[str, Any]) -> dict[str, Any]:
    result = await s.call_tool("execute_decision", args)
    assert result.isError, body(result)
    return dict(body(result)["error"])


async def approved_low_confidence(engine: ReferenceEngine, s: ClientSession) -> dict[str, Any]:
    """A planned, logged and approved decision the confidence gate blocks (price_increase)."""
    p = await plan(s, "price_increase")
    decision_id = await log_planned(s, p)
    answer = await approve(engine, p["plan_id"], {"plan_hash": p["plan_hash"], "nonce": p["nonce"]})
    assert answer.status_code == 200, answer.text
    return {"decision_id": decision_id, "nonce": p["nonce"], "plan_id": p["plan_id"]}


@pytest.fixture
def strict(start_engine: Callable[..., ReferenceEngine]) -> ReferenceEngine:
    return start_engine(relaxed=False, keys=ROLES_KEYS)


@pytest.mark.parametrize("flags", OVERRIDES, ids=lambda f: "+".join(f))
async def test_strict_the_agent_key_cannot_override(
    strict: ReferenceEngine,
    webhook: WebhookReceiver,
    mcp_session: Session,
    flags: dict[str, bool],
) -> None:
    async with mcp_session(strict.url, api_key=AGENT) as s:
        d = await approved_low_confidence(strict, s)
        args = {
            "decision_id": d["decision_id"],
            "webhook_url": webhook.url,
            "idempotency_key": "agent-override",
            "nonce": d["nonce"],
        }
        error = await refused(s, {**args, **flags})
        gate = await refused(s, {**args, "idempotency_key": "agent-plain"})
        explicit_false = await refused(
            s, {**args, "idempotency_key": "agent-false", "force": False, "override_safety": False}
        )
    assert error["code"] == "override_not_permitted"
    assert "graph-worker" in error["message"] and "operator" in error["message"]
    # the same key without the flags is an ordinary call: the gate still answers
    assert gate["gate"] == explicit_false["gate"] == "confidence"
    assert webhook.received == [] and strict.executions() == []


async def test_strict_an_operator_key_with_execute_enabled_overrides(
    strict: ReferenceEngine, webhook: WebhookReceiver, mcp_session: Session
) -> None:
    async with mcp_session(strict.url, api_key=AGENT) as s:
        d = await approved_low_confidence(strict, s)
    args = {
        "decision_id": d["decision_id"],
        "webhook_url": webhook.url,
        "idempotency_key": "staff-override",
        "nonce": d["nonce"],
        "override_safety": True,
    }
    async with mcp_session(strict.url, api_key=OPERATOR) as s:
        not_enabled = await refused(s, {**args, "idempotency_key": "alice-override"})
    async with mcp_session(strict.url, api_key=STAFF) as s:
        plain = await refused(
            s, {**args, "idempotency_key": "staff-plain", "override_safety": False}
        )
        receipt = await call(s, "execute_decision", args)
    # an operator key the engine operator did not enable to execute cannot override either
    assert not_enabled["code"] == "execute_not_enabled" and "alice" in not_enabled["message"]
    # an operator-only key runs overrides, not plain executions (those need the agent role)
    assert plain["code"] == "role_not_permitted"
    assert receipt["execution_status"] == "delivered" and receipt["safety_overridden"] is True
    assert receipt["executed_by"] == "oncall-ops" and receipt["plan_id"] == d["plan_id"]
    [execution] = strict.executions()
    assert execution["override_safety"] is True and execution["executed_by"] == "oncall-ops"
    assert len(webhook.received) == 1


async def test_strict_a_key_with_both_roles_overrides(
    strict: ReferenceEngine, webhook: WebhookReceiver, mcp_session: Session
) -> None:
    async with mcp_session(strict.url, api_key=BOTH) as s:
        d = await approved_low_confidence(strict, s)
        receipt = await call(
            s,
            "execute_decision",
            {
                "decision_id": d["decision_id"],
                "webhook_url": webhook.url,
                "idempotency_key": "both",
                "nonce": d["nonce"],
                "override_safety": True,
            },
        )
    assert receipt["safety_overridden"] is True and receipt["executed_by"] == "superuser"


async def test_relaxed_with_keys_overrides_still_need_an_operator(
    start_engine: Callable[..., ReferenceEngine], webhook: WebhookReceiver, mcp_session: Session
) -> None:
    engine = start_engine(relaxed=True, keys=ROLES_KEYS)
    fields = {
        "chosen_action": "raise_price_4pct",
        "expected_value": 1.0,
        "confidence": 0.3,
        "risk_p5": 0.1,
        "risk_p95": 0.2,
    }
    async with mcp_session(engine.url, api_key=AGENT) as s:
        decision_id = (await call(s, "log_decision", fields))["decision_id"]
        args = {"decision_id": decision_id, "webhook_url": webhook.url}
        agent = await refused(s, {**args, "override_safety": True})
        assert engine.executions() == []
        # relaxed: a plain execution by any valid key is as before (the gate answers)
        gate = await refused(s, args)
    async with mcp_session(engine.url, api_key="tok-agent-readonly") as s:  # execute: false
        readonly = await refused(s, {**args, "override_safety": True})
    async with mcp_session(engine.url, api_key=STAFF) as s:
        receipt = await call(s, "execute_decision", {**args, "override_safety": True})
        forced = await call(s, "execute_decision", {**args, "force": True, "override_safety": True})
    assert agent["code"] == readonly["code"] == "override_not_permitted"
    assert gate["gate"] == "confidence"
    assert receipt["safety_overridden"] is True and receipt["executed_by"] == "oncall-ops"
    assert forced["execution_status"] == "delivered"
    assert [e["executed_by"] for e in engine.executions()] == ["oncall-ops", "oncall-ops"]


async def test_relaxed_without_keys_anyone_overrides_and_the_contract_says_so(
    engine: ReferenceEngine, webhook: WebhookReceiver, mcp_session: Session
) -> None:
    async with mcp_session(engine.url) as s:
        decision_id = (
            await call(
                s,
                "log_decision",
                {
                    "chosen_action": "a",
                    "expected_value": 1.0,
                    "confidence": 0.3,
                    "risk_p5": 0.1,
                    "risk_p95": 0.2,
                },
            )
        )["decision_id"]
        receipt = await call(
            s,
            "execute_decision",
            {"decision_id": decision_id, "webhook_url": webhook.url, "override_safety": True},
        )
        contract = await call(s, "get_contract", {})
    assert receipt["safety_overridden"] is True and receipt["executed_by"] is None
    assert contract["override_requires"].startswith("nothing: this engine has no API keys")


async def test_the_contract_of_an_engine_with_keys_names_the_override_requirement(
    strict: ReferenceEngine, mcp_session: Session
) -> None:
    async with mcp_session(strict.url, api_key=AGENT) as s:
        contract = await call(s, "get_contract", {})
    assert "operator role" in contract["override_requires"]
    assert "override_not_permitted" in contract["override_requires"]


@pytest.mark.parametrize("denials", ["json-body", "sdk"])
async def test_the_refusal_is_in_the_engines_denials_wire_form(
    start_engine: Callable[..., ReferenceEngine],
    webhook: WebhookReceiver,
    mcp_session: Session,
    denials: str,
) -> None:
    engine = start_engine(relaxed=False, keys=ROLES_KEYS, denials=denials)
    async with mcp_session(engine.url, api_key=AGENT) as s:
        d = await approved_low_confidence(engine, s)
        result = await s.call_tool(
            "execute_decision",
            {
                "decision_id": d["decision_id"],
                "webhook_url": webhook.url,
                "idempotency_key": "wire",
                "nonce": d["nonce"],
                "force": True,
            },
        )
    assert result.isError is False
    error = body(result)["error"]
    assert error["code"] == "override_not_permitted"
    if denials == "sdk":
        assert error["status_code"] == 403
        assert json.loads(error["message"].removeprefix("API error 403: "))["error"]["code"] == (
            "override_not_permitted"
        )
    assert webhook.received == [] and engine.executions() == []
