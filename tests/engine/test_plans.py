"""Each decision runs under its own plan's approval (invariant 11 of docs/ARCHITECTURE.md), on a
strict reference engine over real MCP and real HTTP.

Every ``plan_decision`` of one scenario has the same ``plan_hash``, so a decision is bound to a
plan by its ``plan_id``: ``log_decision(plan_id=...)``, or ``plan_hash`` alone when exactly one
unbound plan has it (several: ``plan_ambiguous``). A strict ``execute_decision`` accepts only the
nonce of the decision's bound plan and spends exactly that plan; its receipt names it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from engine_support import (
    AGENT,
    KEYS,
    OPERATOR,
    approve,
    body,
    call,
    plan,
)
from mcp import ClientSession

from algenta_graph.engine import ReferenceEngine, WebhookReceiver

Session = Callable[..., Any]
FIELDS = ("chosen_action", "expected_value", "confidence", "risk_p5", "risk_p95")


@pytest.fixture
def strict(start_engine: Callable[..., ReferenceEngine]) -> ReferenceEngine:
    return start_engine(relaxed=False, keys=KEYS)


async def log(s: ClientSession, p: dict[str, Any], **binding: Any) -> dict[str, Any]:
    return await call(s, "log_decision", {**{k: p[k] for k in FIELDS}, **binding})


async def error_of(s: ClientSession, name: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await s.call_tool(name, args)
    assert result.isError, body(result)
    return dict(body(result)["error"])


async def approve_ok(engine: ReferenceEngine, p: dict[str, Any]) -> None:
    answer = await approve(engine, p["plan_id"], {"plan_hash": p["plan_hash"], "nonce": p["nonce"]})
    assert answer.status_code == 200, answer.text


async def shown(engine: ReferenceEngine, plan_id: str) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=10) as http:
        answer = await http.get(
            engine.approve_url.format(plan_id=plan_id).removesuffix("/approve"),
            headers={"Authorization": f"Bearer {OPERATOR}"},
        )
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def execute_args(decision_id: str, url: str, nonce: str, key: str) -> dict[str, Any]:
    return {"decision_id": decision_id, "webhook_url": url, "idempotency_key": key, "nonce": nonce}


async def test_issue_19_case_5_two_plans_with_one_hash_each_decision_runs_under_its_own(
    strict: ReferenceEngine, webhook: WebhookReceiver, mcp_session: Session
) -> None:
    """The issue's case: one scenario planned twice (one plan_hash), both plans approved, a
    decision logged on each. The nonce the graph used to pick (the latest one for the hash, the
    second plan's) no longer runs the first decision; each runs under its own plan, and both
    plans end spent. On the code before the fix the first decision ran under the second plan
    (its receipt named the other plan_id) and the first plan stayed approved and unspent."""
    async with mcp_session(strict.url, api_key=AGENT) as s:
        p1 = await plan(s)
        d1 = await log(s, p1, plan_hash=p1["plan_hash"])  # the only plan then: bound to it
        p2 = await plan(s)
        d2 = await log(s, p2, plan_hash=p2["plan_hash"])  # p1 is bound: bound to p2
        assert p1["plan_hash"] == p2["plan_hash"] and p1["plan_id"] != p2["plan_id"]
        await approve_ok(strict, p1)
        await approve_ok(strict, p2)
        first, second = d1["decision_id"], d2["decision_id"]
        # the latest nonce for the hash (the second plan's) is not the first decision's
        wrong = await error_of(
            s, "execute_decision", execute_args(first, webhook.url, p2["nonce"], "k-wrong")
        )
        r1 = await call(s, "execute_decision", execute_args(first, webhook.url, p1["nonce"], "k1"))
        r2 = await call(s, "execute_decision", execute_args(second, webhook.url, p2["nonce"], "k2"))
        read1 = await call(s, "get_decision", {"decision_id": first})
        read2 = await call(s, "get_decision", {"decision_id": second})
    assert wrong["code"] == "invalid_nonce" and p1["plan_id"] in wrong["message"]
    assert (d1["decision"]["plan_id"], d2["decision"]["plan_id"]) == (p1["plan_id"], p2["plan_id"])
    assert (r1["plan_id"], r2["plan_id"]) == (p1["plan_id"], p2["plan_id"])
    assert r1["execution_status"] == r2["execution_status"] == "delivered"
    assert read1["decision"]["plan_id"] == p1["plan_id"]
    assert read2["decision"]["plan_id"] == p2["plan_id"]
    assert (await shown(strict, p1["plan_id"]))["state"] == "executed"
    assert (await shown(strict, p2["plan_id"]))["state"] == "executed"
    assert [b["decision_id"] for b in webhook.received] == [first, second]


async def test_plan_hash_alone_with_several_unbound_plans_is_refused_by_name(
    strict: ReferenceEngine, mcp_session: Session
) -> None:
    async with mcp_session(strict.url, api_key=AGENT) as s:
        p1 = await plan(s)
        p2 = await plan(s)
        ambiguous = await error_of(
            s, "log_decision", {**{k: p1[k] for k in FIELDS}, "plan_hash": p1["plan_hash"]}
        )
        listed = await call(s, "list_decisions", {})
        by_id = await log(s, p2, plan_id=p2["plan_id"])
        by_hash = await log(s, p1, plan_hash=p1["plan_hash"])  # p2 is bound now: only p1
    assert ambiguous["code"] == "plan_ambiguous"
    assert p1["plan_id"] in ambiguous["message"] and p2["plan_id"] in ambiguous["message"]
    assert "plan_id" in ambiguous["message"]
    assert sorted(ambiguous["candidate_plan_ids"]) == sorted([p1["plan_id"], p2["plan_id"]])
    assert listed["total"] == 0  # nothing was written
    assert by_id["decision"]["plan_id"] == p2["plan_id"]
    assert by_hash["decision"]["plan_id"] == p1["plan_id"]


async def test_log_decision_by_plan_id_checks_the_plan(
    strict: ReferenceEngine, mcp_session: Session
) -> None:
    async with mcp_session(strict.url, api_key=AGENT) as s:
        p = await plan(s)
        other = await plan(s, "price_increase")
        unknown = await error_of(
            s, "log_decision", {**{k: p[k] for k in FIELDS}, "plan_id": "plan_nope"}
        )
        hash_of_another = await error_of(
            s,
            "log_decision",
            {**{k: p[k] for k in FIELDS}, "plan_id": p["plan_id"], "plan_hash": other["plan_hash"]},
        )
        numbers_of_another = await error_of(
            s, "log_decision", {**{k: other[k] for k in FIELDS}, "plan_id": p["plan_id"]}
        )
        listed = await call(s, "list_decisions", {})
        bound = await log(s, p, plan_id=p["plan_id"], plan_hash=p["plan_hash"])
        again = await error_of(
            s, "log_decision", {**{k: p[k] for k in FIELDS}, "plan_id": p["plan_id"]}
        )
        none_free = await error_of(
            s, "log_decision", {**{k: p[k] for k in FIELDS}, "plan_hash": p["plan_hash"]}
        )
        after = await call(s, "list_decisions", {})
    assert unknown["code"] == "plan_not_found" and "plan_nope" in unknown["message"]
    assert hash_of_another["code"] == "plan_hash_mismatch"
    assert numbers_of_another["code"] == "plan_hash_mismatch"
    assert "chosen_action" in numbers_of_another["message"]
    assert listed["total"] == 0
    assert bound["decision"]["plan_id"] == p["plan_id"]
    assert bound["decision"]["plan_hash"] == p["plan_hash"]
    assert again["code"] == none_free["code"] == "plan_already_bound"
    assert bound["decision_id"] in again["message"]
    assert after["total"] == 1


async def test_get_decision_shows_the_bound_plan(
    strict: ReferenceEngine, mcp_session: Session
) -> None:
    async with mcp_session(strict.url, api_key=AGENT) as s:
        p = await plan(s)
        logged = await log(s, p, plan_id=p["plan_id"])
        before = await call(s, "get_decision", {"decision_id": logged["decision_id"]})
        await approve_ok(strict, p)
        after = await call(s, "get_decision", {"decision_id": logged["decision_id"]})
        unplanned = await log(s, p)  # no plan at all
        bare = await call(s, "get_decision", {"decision_id": unplanned["decision_id"]})
    assert before["decision"]["plan_id"] == p["plan_id"]
    assert before["plan"] == {
        "plan_id": p["plan_id"],
        "plan_hash": p["plan_hash"],
        "state": "proposed",
        "nonce": p["nonce"],
        "approved_by": None,
        "approved_at": None,
        "execution_id": None,
    }
    assert after["plan"]["state"] == "approved" and after["plan"]["approved_by"] == "alice"
    assert bare["decision"]["plan_id"] is None and bare["plan"] is None


async def test_a_force_re_execution_runs_under_a_new_plan_proposed_for_that_decision(
    start_engine: Callable[..., ReferenceEngine], webhook: WebhookReceiver, mcp_session: Session
) -> None:
    """An executed plan cannot run again; ``plan_decision(decision_id=...)`` proposes a new one
    bound to that decision (refused while its plan is unspent), which an operator approves."""
    from engine_support import ROLES_KEYS, STAFF
    from http_api_support import counts

    engine = start_engine(relaxed=False, keys=ROLES_KEYS)
    async with mcp_session(engine.url, api_key=AGENT) as s:
        p1 = await plan(s)
        decision_id = (await log(s, p1, plan_id=p1["plan_id"]))["decision_id"]
        before = counts(engine.db_path)
        early = await error_of(
            s, "plan_decision", {"scenario": "restock_inventory", "decision_id": decision_id}
        )
        unknown = await error_of(
            s, "plan_decision", {"scenario": "restock_inventory", "decision_id": "dec_nope"}
        )
        assert counts(engine.db_path) == before  # refused: no plan, no proposal written
        await approve_ok(engine, p1)
        first = await call(
            s, "execute_decision", execute_args(decision_id, webhook.url, p1["nonce"], "f1")
        )
        other_scenario = await error_of(
            s, "plan_decision", {"scenario": "price_increase", "decision_id": decision_id}
        )
        p2 = await call(
            s, "plan_decision", {"scenario": "restock_inventory", "decision_id": decision_id}
        )
        read = await call(s, "get_decision", {"decision_id": decision_id})
    await approve_ok(engine, p2)
    async with mcp_session(engine.url, api_key=STAFF) as s:
        spent = await error_of(
            s,
            "execute_decision",
            {**execute_args(decision_id, webhook.url, p1["nonce"], "f2"), "force": True},
        )
        forced = await call(
            s,
            "execute_decision",
            {**execute_args(decision_id, webhook.url, p2["nonce"], "f3"), "force": True},
        )
    assert early["code"] == "plan_not_spent" and p1["plan_id"] in early["message"]
    assert unknown["code"] == "decision_not_found"
    assert first["plan_id"] == p1["plan_id"]
    assert other_scenario["code"] == "plan_hash_mismatch"
    assert p2["decision_id"] == decision_id and p2["plan_hash"] == p1["plan_hash"]
    assert read["decision"]["plan_id"] == p2["plan_id"]
    assert spent["code"] == "invalid_nonce"
    assert forced["plan_id"] == p2["plan_id"] and forced["execution_status"] == "delivered"
    assert len(webhook.received) == 2


async def test_concurrent_logs_on_one_plan_bind_it_once(
    strict: ReferenceEngine, mcp_session: Session
) -> None:
    async with mcp_session(strict.url, api_key=AGENT) as s:
        p = await plan(s)
        results = await asyncio.gather(
            *(
                s.call_tool("log_decision", {**{k: p[k] for k in FIELDS}, "plan_id": p["plan_id"]})
                for _ in range(6)
            )
        )
        listed = await call(s, "list_decisions", {})
    codes = sorted("ok" if not r.isError else body(r)["error"]["code"] for r in results)
    assert codes == ["ok"] + ["plan_already_bound"] * 5
    assert listed["total"] == 1
