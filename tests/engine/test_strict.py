"""The execute profile's ``requires_all_of`` on a strict reference engine, over real MCP and real
HTTP: each requirement refuses execution without it (with the engine's named code, nothing
sent), the operator's out-of-band approval API, and the full flow
plan -> log with plan_hash -> approval over HTTP -> execute -> receipt."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from engine_support import (
    AGENT,
    KEYS,
    NO_EXECUTE,
    ONCALL,
    OPERATOR,
    approve,
    body,
    call,
    engine_process,
    log_planned,
    plan,
)
from mcp import ClientSession

from algenta_graph._net import free_port
from algenta_graph.connection.outcomes import ExecutionReceipt, parse_execution_outcome
from algenta_graph.engine import ReferenceEngine, WebhookReceiver
from algenta_graph.engine.auth import token_hash
from algenta_graph.engine.contract import DEFAULT_RELAXED

Session = Callable[..., Any]


TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


@pytest.fixture
def strict(start_engine: Callable[..., ReferenceEngine]) -> ReferenceEngine:
    return start_engine(relaxed=False, keys=KEYS)


async def approved_decision(
    engine: ReferenceEngine, s: ClientSession
) -> tuple[str, dict[str, Any]]:
    p = await plan(s)
    decision_id = await log_planned(s, p)
    answer = await approve(engine, p["plan_id"], {"plan_hash": p["plan_hash"], "nonce": p["nonce"]})
    assert answer.status_code == 200, answer.text
    return decision_id, p


async def refused(s: ClientSession, args: dict[str, Any]) -> dict[str, Any]:
    result = await s.call_tool("execute_decision", args)
    assert result.isError, body(result)
    return dict(body(result)["error"])


# -- the full flow ------------------------------------------------------------------------------


async def test_the_full_strict_flow_plan_log_approve_execute(
    strict: ReferenceEngine, webhook: WebhookReceiver, mcp_session: Session
) -> None:
    async with mcp_session(strict.url, api_key=AGENT) as s:
        p = await plan(s)
        assert p["approval_state"] == "proposed" and p["nonce"] and p["plan_id"].startswith("plan_")
        assert p["approve_at"] == f"/v1/decision-plans/{p['plan_id']}/approve"
        decision_id = await log_planned(s, p)
        # the operator approves out of band, over HTTP, with the plan's hash and nonce
        answer = await approve(
            strict, p["plan_id"], {"plan_hash": p["plan_hash"], "nonce": p["nonce"]}
        )
        assert answer.status_code == 200
        assert answer.json()["status"] == "approved"
        assert answer.json()["approved_by"] == "alice"
        args = {
            "decision_id": decision_id,
            "webhook_url": webhook.url,
            "idempotency_key": "thread-1:call-1",
            "nonce": p["nonce"],
        }
    headers = {"Authorization": f"Bearer {AGENT}", "traceparent": f"00-{TRACE}-00f067aa0ba902b7-01"}
    async with (
        httpx.AsyncClient(headers=headers, timeout=30) as http,
        mcp_session_with(http, strict.url) as s,
    ):
        receipt = await call(s, "execute_decision", args)
        replay = await call(s, "execute_decision", args)  # the same key: the same receipt
        again = await refused(s, {**args, "idempotency_key": "thread-1:call-2"})
    assert receipt["execution_status"] == "delivered" and receipt["response_code"] == 200
    assert receipt["plan_hash"] == p["plan_hash"] and receipt["plan_id"] == p["plan_id"]
    assert receipt["approval_state"] == "approved" and receipt["receipt_version"] == "2"
    assert receipt["idempotency_key"] == "thread-1:call-1"
    assert receipt["executed_by"] == "graph-worker" and receipt["trace_id"] == TRACE
    assert isinstance(parse_execution_outcome(receipt), ExecutionReceipt)
    assert replay == {**receipt, "idempotent_replay": True}
    assert again["gate"] == "idempotency"
    assert len(webhook.received) == 1 and webhook.received[0]["decision_id"] == decision_id
    async with httpx.AsyncClient(timeout=10) as http:
        shown = await http.get(
            strict.approve_url.format(plan_id=p["plan_id"]).removesuffix("/approve"),
            headers={"Authorization": f"Bearer {OPERATOR}"},
        )
    assert shown.json()["state"] == "executed"
    assert shown.json()["execution_id"] == receipt["execution_id"]


def mcp_session_with(http: httpx.AsyncClient, url: str) -> Any:
    """An MCP session over a given httpx client (to send extra headers such as traceparent)."""
    import contextlib

    from mcp.client.streamable_http import streamable_http_client

    @contextlib.asynccontextmanager
    async def session() -> Any:
        async with (
            streamable_http_client(url, http_client=http) as (read, write, _),
            ClientSession(read, write) as s,
        ):
            await s.initialize()
            yield s

    return session()


# -- each requirement refuses execution without it ----------------------------------------------


async def test_without_any_api_key_execute_is_not_enabled(
    start_engine: Callable[..., ReferenceEngine],
    webhook: WebhookReceiver,
    mcp_session: Session,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level("WARNING", logger="algenta_graph.engine"):
        engine = start_engine(relaxed=False)
    assert "execute_decision is refused for every caller" in caplog.text
    async with mcp_session(engine.url) as s:
        p = await plan(s)
        decision_id = await log_planned(s, p)
        error = await refused(
            s,
            {
                "decision_id": decision_id,
                "webhook_url": webhook.url,
                "idempotency_key": "k",
                "nonce": p["nonce"],
            },
        )
    assert error["code"] == "execute_not_enabled" and "--keys-file" in error["message"]
    assert webhook.received == [] and engine.executions() == []


@pytest.mark.parametrize(
    ("token", "code"),
    [(NO_EXECUTE, "execute_not_enabled"), (OPERATOR, "role_not_permitted")],
)
async def test_a_key_without_execute_or_the_agent_role_is_refused(
    strict: ReferenceEngine,
    webhook: WebhookReceiver,
    mcp_session: Session,
    token: str,
    code: str,
) -> None:
    async with mcp_session(strict.url, api_key=AGENT) as s:
        decision_id, p = await approved_decision(strict, s)
    async with mcp_session(strict.url, api_key=token) as s:
        error = await refused(
            s,
            {
                "decision_id": decision_id,
                "webhook_url": webhook.url,
                "idempotency_key": "k",
                "nonce": p["nonce"],
            },
        )
    assert error["code"] == code and KEYS[token].identity in error["message"]
    assert webhook.received == [] and strict.executions() == []


@pytest.mark.parametrize(
    ("drop", "code"), [("idempotency_key", "idempotency_key_required"), ("nonce", "nonce_required")]
)
async def test_a_call_without_idempotency_key_or_nonce_is_refused(
    strict: ReferenceEngine, webhook: WebhookReceiver, mcp_session: Session, drop: str, code: str
) -> None:
    async with mcp_session(strict.url, api_key=AGENT) as s:
        decision_id, p = await approved_decision(strict, s)
        args = {
            "decision_id": decision_id,
            "webhook_url": webhook.url,
            "idempotency_key": "k",
            "nonce": p["nonce"],
        }
        missing = await refused(s, {k: v for k, v in args.items() if k != drop})
        empty = await refused(s, {**args, drop: ""})
    assert missing["code"] == empty["code"] == code and drop in missing["message"]
    assert webhook.received == [] and strict.executions() == []


async def test_a_decision_logged_without_a_plan_hash_is_refused(
    strict: ReferenceEngine, webhook: WebhookReceiver, mcp_session: Session
) -> None:
    async with mcp_session(strict.url, api_key=AGENT) as s:
        _, p = await approved_decision(strict, s)
        fields = ("chosen_action", "expected_value", "confidence", "risk_p5", "risk_p95")
        unplanned = await call(s, "log_decision", {k: p[k] for k in fields})
        error = await refused(
            s,
            {
                "decision_id": unplanned["decision_id"],
                "webhook_url": webhook.url,
                "idempotency_key": "k",
                "nonce": p["nonce"],
            },
        )
    assert error["code"] == "plan_required" and "plan_hash" in error["message"]
    assert webhook.received == [] and strict.executions() == []


async def test_a_wrong_nonce_is_refused(
    strict: ReferenceEngine, webhook: WebhookReceiver, mcp_session: Session
) -> None:
    async with mcp_session(strict.url, api_key=AGENT) as s:
        decision_id, _ = await approved_decision(strict, s)
        other = await plan(s, "price_increase")  # a real nonce, of another plan
        errors = [
            await refused(
                s,
                {
                    "decision_id": decision_id,
                    "webhook_url": webhook.url,
                    "idempotency_key": f"k{n}",
                    "nonce": nonce,
                },
            )
            for n, nonce in enumerate(("forged", other["nonce"]))
        ]
    assert [e["code"] for e in errors] == ["invalid_nonce", "invalid_nonce"]
    assert webhook.received == [] and strict.executions() == []


async def test_an_unapproved_plan_is_refused_and_an_executed_one_cannot_run_again(
    strict: ReferenceEngine, webhook: WebhookReceiver, mcp_session: Session
) -> None:
    async with mcp_session(strict.url, api_key=AGENT) as s:
        p = await plan(s)
        decision_id = await log_planned(s, p)
        args = {"decision_id": decision_id, "webhook_url": webhook.url, "nonce": p["nonce"]}
        unapproved = await refused(s, {**args, "idempotency_key": "k1"})
        assert webhook.received == []
        answer = await approve(
            strict, p["plan_id"], {"plan_hash": p["plan_hash"], "nonce": p["nonce"]}
        )
        assert answer.status_code == 200
        first = await call(s, "execute_decision", {**args, "idempotency_key": "k2"})
    async with mcp_session(strict.url, api_key=ONCALL) as s:
        # past the idempotency gate (an operator's force), the plan itself is spent
        spent = await refused(s, {**args, "idempotency_key": "k3", "force": True})
    assert unapproved["code"] == spent["code"] == "plan_not_approved"
    assert f"/v1/decision-plans/{p['plan_id']}/approve" in unapproved["message"]
    assert first["execution_status"] == "delivered"
    assert len(webhook.received) == 1 and len(strict.executions()) == 1


async def test_a_refused_delivery_leaves_the_approval_unspent(
    strict: ReferenceEngine, webhook: WebhookReceiver, mcp_session: Session
) -> None:
    """Nothing was sent (connection refused): the plan is approved again, a retry delivers."""
    closed = f"http://127.0.0.1:{free_port()}/hook"
    async with mcp_session(strict.url, api_key=AGENT) as s:
        decision_id, p = await approved_decision(strict, s)
        args = {"decision_id": decision_id, "nonce": p["nonce"]}
        failed = await call(
            s, "execute_decision", {**args, "webhook_url": closed, "idempotency_key": "a1"}
        )
        retried = await call(
            s, "execute_decision", {**args, "webhook_url": webhook.url, "idempotency_key": "a2"}
        )
    assert failed["execution_status"] == "failed" and failed["retryable"] is True
    assert retried["execution_status"] == "delivered"
    assert len(webhook.received) == 1


async def test_an_unknown_delivery_spends_the_approval(
    strict: ReferenceEngine, webhook: WebhookReceiver, mcp_session: Session
) -> None:
    async with mcp_session(strict.url, api_key=AGENT) as s:
        decision_id, p = await approved_decision(strict, s)
        args = {"decision_id": decision_id, "nonce": p["nonce"], "webhook_url": webhook.url}
        slow = {**args, "webhook_url": webhook.url_for_delay(3), "timeout_seconds": 1}
        unknown = await call(s, "execute_decision", {**slow, "idempotency_key": "u1"})
        gate = await refused(s, {**args, "idempotency_key": "u2"})
    async with mcp_session(strict.url, api_key=ONCALL) as s:
        forced = await refused(s, {**args, "idempotency_key": "u3", "force": True})
    assert unknown["execution_status"] == "unknown"
    assert gate["gate"] == "idempotency" and forced["code"] == "plan_not_approved"
    assert len(webhook.received) == 1


async def test_an_idempotency_key_of_another_decision_is_refused(
    strict: ReferenceEngine, webhook: WebhookReceiver, mcp_session: Session
) -> None:
    async with mcp_session(strict.url, api_key=AGENT) as s:
        first, p1 = await approved_decision(strict, s)
        second, p2 = await approved_decision(strict, s)
        base = {"webhook_url": webhook.url, "idempotency_key": "same"}
        await call(s, "execute_decision", {**base, "decision_id": first, "nonce": p1["nonce"]})
        error = await refused(s, {**base, "decision_id": second, "nonce": p2["nonce"]})
        elsewhere = await refused(
            s,
            {
                **base,
                "decision_id": first,
                "nonce": p1["nonce"],
                "webhook_url": webhook.url_for_status(200),
            },
        )
    assert error["code"] == elsewhere["code"] == "idempotency_key_reused"
    assert "webhook_url" in elsewhere["message"]
    assert len(webhook.received) == 1


# -- the approval API ---------------------------------------------------------------------------


async def test_the_approval_api_codes(strict: ReferenceEngine, mcp_session: Session) -> None:
    async with mcp_session(strict.url, api_key=AGENT) as s:
        p = await plan(s)
    good = {"plan_hash": p["plan_hash"], "nonce": p["nonce"]}
    pid = p["plan_id"]
    answers = {
        "no key": await approve(strict, pid, good, token=None),
        "unknown key": await approve(strict, pid, good, token="nope"),
        "agent key": await approve(strict, pid, good, token=AGENT),
        "bad body": await approve(strict, pid, {"plan_hash": p["plan_hash"]}),
        "unknown plan": await approve(strict, "plan_nope", good),
        "wrong nonce": await approve(strict, pid, {**good, "nonce": "x"}),
        "wrong hash": await approve(strict, pid, {**good, "plan_hash": "sha256:0"}),
        "approved": await approve(strict, pid, good),
        "again": await approve(strict, pid, good),
    }
    got = {
        k: (v.status_code, v.json().get("error", v.json()).get("code")) for k, v in answers.items()
    }
    assert got == {
        "no key": (401, "unauthorized"),
        "unknown key": (401, "unauthorized"),
        "agent key": (403, "role_not_permitted"),
        "bad body": (400, "invalid_request"),
        "unknown plan": (404, "plan_not_found"),
        "wrong nonce": (403, "invalid_nonce"),
        "wrong hash": (403, "plan_hash_mismatch"),
        "approved": (200, None),
        "again": (409, "plan_not_approvable"),
    }
    assert answers["approved"].json()["status"] == "approved"


async def test_concurrent_approvals_take_effect_once(
    strict: ReferenceEngine, mcp_session: Session
) -> None:
    async with mcp_session(strict.url, api_key=AGENT) as s:
        p = await plan(s)
    good = {"plan_hash": p["plan_hash"], "nonce": p["nonce"]}
    answers = await asyncio.gather(*(approve(strict, p["plan_id"], good) for _ in range(8)))
    assert sorted(a.status_code for a in answers) == [200] + [409] * 7


async def test_approval_is_http_only_never_an_mcp_tool(
    strict: ReferenceEngine, mcp_session: Session
) -> None:
    async with mcp_session(strict.url, api_key=OPERATOR) as s:
        names = {t.name for t in (await s.list_tools()).tools}
        contract = await call(s, "get_contract", {})
    # the registry advertises approve_agent_run (answered not_supported): no plan approval
    assert not {n for n in names if "approv" in n and "plan" in n}
    assert not [n for n in contract["capabilities"]["implemented_tools"] if "approv" in n]
    assert contract["mode"] == "strict"
    assert contract["approval_endpoint"] == "POST /v1/decision-plans/{plan_id}/approve"
    assert len(contract["execute_requires"]) == 6


# -- the schema and the relaxed mode ------------------------------------------------------------


async def test_strict_schema_declares_idempotency_key_and_nonce_required_relaxed_does_not(
    strict: ReferenceEngine,
    start_engine: Callable[..., ReferenceEngine],
    webhook: WebhookReceiver,
    mcp_session: Session,
) -> None:
    relaxed = start_engine(relaxed=True)
    async with mcp_session(strict.url, api_key=AGENT) as s:
        strict_schema = next(
            t.inputSchema for t in (await s.list_tools()).tools if t.name == "execute_decision"
        )
    async with mcp_session(relaxed.url) as s:
        relaxed_schema = next(
            t.inputSchema for t in (await s.list_tools()).tools if t.name == "execute_decision"
        )
        decision = await call(
            s,
            "log_decision",
            {
                "chosen_action": "a",
                "expected_value": 1.0,
                "confidence": 0.9,
                "risk_p5": 0.1,
                "risk_p95": 0.2,
            },
        )
        unknown = await refused(
            s, {"decision_id": decision["decision_id"], "webhook_url": webhook.url, "nonce": "n"}
        )
        plain = await call(
            s,
            "execute_decision",
            {"decision_id": decision["decision_id"], "webhook_url": webhook.url},
        )
    for field in ("idempotency_key", "nonce"):
        assert field in strict_schema["required"]
        assert strict_schema["properties"][field]["type"] == "string"
        assert field not in relaxed_schema["properties"]
    assert set(relaxed_schema["required"]) == {"decision_id", "webhook_url"}
    assert unknown["code"] == "invalid_arguments" and "nonce" in unknown["message"]
    assert plain["execution_status"] == "delivered" and plain["approval_state"] == "not_required"


def test_the_default_mode_is_one_constant(tmp_path: Path) -> None:
    engine = ReferenceEngine(db=tmp_path / "e.sqlite")
    assert engine.relaxed is DEFAULT_RELAXED
    assert ReferenceEngine(db=tmp_path / "s.sqlite", relaxed=False).relaxed is False


async def test_cli_strict_with_a_keys_file(
    tmp_path: Path, webhook: WebhookReceiver, mcp_session: Session
) -> None:
    keys = tmp_path / "keys.json"
    keys.write_text(
        json.dumps(
            {
                token_hash(AGENT): {
                    "identity": "graph-worker",
                    "roles": ["agent"],
                    "execute": True,
                },
                token_hash(OPERATOR): {"identity": "alice", "roles": ["operator"]},
            }
        )
    )
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    args = ("--db", str(tmp_path / "e.sqlite"), "--strict", "--keys-file", str(keys))
    with engine_process(port, tmp_path / "engine.log", *args):
        async with mcp_session(url, api_key=AGENT) as s:
            p = await plan(s)
            decision_id = await log_planned(s, p)
            async with httpx.AsyncClient(timeout=10) as http:
                answer = await http.post(
                    f"http://127.0.0.1:{port}/v1/decision-plans/{p['plan_id']}/approve",
                    json={"plan_hash": p["plan_hash"], "nonce": p["nonce"]},
                    headers={"Authorization": f"bearer {OPERATOR}"},
                )
            receipt = await call(
                s,
                "execute_decision",
                {
                    "decision_id": decision_id,
                    "webhook_url": webhook.url,
                    "idempotency_key": "cli-1",
                    "nonce": p["nonce"],
                },
            )
    assert answer.status_code == 200 and answer.json()["approved_by"] == "alice"
    assert receipt["execution_status"] == "delivered" and receipt["executed_by"] == "graph-worker"
    log = (tmp_path / "engine.log").read_text()
    assert "strict" in log and f"approve {p['plan_id']} by alice -> approved" in log
    assert "Traceback" not in log
