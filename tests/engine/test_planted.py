"""Tests that catch the mutations a hand-made mutation pass planted in the engine and the suite
missed, over real HTTP and real MCP:

- the approval API taking ``approved_by`` from the request body: it is always the identity of
  the operator key that approved;
- the webhook allow-list matching a host by suffix (or prefix): an allowed host is matched
  exactly (case-insensitively), never ``evilhooks.internal`` for ``hooks.internal``, and never a
  subdomain such as ``x.hooks.internal`` (list it to allow it).

Each was checked by planting the mutation and watching the test fail (see the engine README).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from engine_support import AGENT, KEYS, OPERATOR, approve, body, call, log_planned, plan

from algenta_graph.engine import ReferenceEngine, WebhookReceiver
from algenta_graph.engine.delivery import check_webhook_url
from algenta_graph.engine.errors import EngineToolError

Session = Callable[..., Any]


async def test_approved_by_is_the_operator_keys_identity_never_the_body(
    start_engine: Callable[..., ReferenceEngine], webhook: WebhookReceiver, mcp_session: Session
) -> None:
    engine = start_engine(relaxed=False, keys=KEYS)
    async with mcp_session(engine.url, api_key=AGENT) as s:
        p = await plan(s)
        decision_id = await log_planned(s, p)
        answer = await approve(
            engine,
            p["plan_id"],
            {
                "plan_hash": p["plan_hash"],
                "nonce": p["nonce"],
                "approved_by": "mallory",
                "identity": "mallory",
            },
        )
        read = await call(s, "get_decision", {"decision_id": decision_id})
        await call(
            s,
            "execute_decision",
            {
                "decision_id": decision_id,
                "webhook_url": webhook.url,
                "idempotency_key": "approver-check",
                "nonce": p["nonce"],
            },
        )
    async with httpx.AsyncClient(timeout=10) as http:
        shown = await http.get(
            engine.approve_url.format(plan_id=p["plan_id"]).removesuffix("/approve"),
            headers={"Authorization": f"Bearer {OPERATOR}"},
        )
        audit = await http.get(
            engine.url.removesuffix("/mcp") + "/v1/audit-logs/export.jsonl",
            headers={"X-API-Key": OPERATOR},
        )
    assert answer.status_code == 200, answer.text
    assert answer.json()["approved_by"] == "alice"
    assert shown.json()["approved_by"] == "alice"
    assert read["plan"]["approved_by"] == "alice"
    assert "mallory" not in answer.text + shown.text + audit.text
    approvals = [json.loads(line) for line in audit.text.splitlines() if "plan.approved" in line]
    assert [(a["action"], a["actor"]) for a in approvals] == [("plan.approved", "alice")]


ALLOWED = ("hooks.internal",)


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("http://hooks.internal/x", True),
        ("https://HOOKS.Internal:8443/x", True),
        ("http://evilhooks.internal/x", False),  # a suffix of the name, not the host
        ("http://x.hooks.internal/x", False),  # a subdomain: exact hosts only
        ("http://hooks.internal.evil.test/x", False),  # a prefix
        ("http://internal/x", False),
        ("http://hooks.internal@evil.test/x", False),  # userinfo: the host is evil.test
    ],
)
def test_the_allow_list_matches_hosts_exactly(url: str, allowed: bool) -> None:
    if allowed:
        assert check_webhook_url(url, allowed_hosts=ALLOWED) == url
        return
    with pytest.raises(EngineToolError) as refused:
        check_webhook_url(url, allowed_hosts=ALLOWED)
    assert refused.value.code == "webhook_host_not_allowed"


async def test_a_suffix_or_subdomain_of_an_allowed_host_is_refused_over_mcp(
    start_engine: Callable[..., ReferenceEngine], mcp_session: Session
) -> None:
    engine = start_engine(allow_webhook_hosts=ALLOWED)
    async with mcp_session(engine.url) as s:
        decision_id = (
            await call(
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
        )["decision_id"]
        answers = {}
        for host in ("evilhooks.internal", "x.hooks.internal", "hooks.internal"):
            result = await s.call_tool(
                "execute_decision",
                {
                    "decision_id": decision_id,
                    "webhook_url": f"http://{host}:9/hook",
                    "timeout_seconds": 2,
                },
            )
            answers[host] = body(result)
    assert answers["evilhooks.internal"]["error"]["code"] == "webhook_host_not_allowed"
    assert answers["x.hooks.internal"]["error"]["code"] == "webhook_host_not_allowed"
    # the allowed host is tried for real (it does not resolve here): a failed delivery
    assert answers["hooks.internal"]["execution_status"] == "failed"
    assert [e["webhook_url"] for e in engine.executions()] == ["http://hooks.internal:9/hook"]
